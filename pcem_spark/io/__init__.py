"""Input and output: the documents table and every file the commands write.

``documents`` reads JSON lines or Parquet strictly (``json_lines`` is the
per-line parser) and splits rejects from good rows; ``warc`` and
``warc_records`` ingest WARC/WET crawls, ``newsgroups`` the 20 Newsgroups
archive, ``descriptions`` the label descriptions of the dataless setting.
``input_files`` decides which files of a documents input are read (a pinned
version, or a folder whose writer has finished). ``hadoop_fs`` is the one
wrapper of the driver JVM's Hadoop FileSystem; ``outputs`` is the one
atomic-output protocol (a staged directory renamed into place, then a
completion marker readers require), with ``versions`` (markers, manifests,
retained versions), ``snapshots`` (readers pin one version), ``leases`` (one
writer per output) and ``output_policy`` (the ``[output]`` settings);
``output_paths`` checks that no output can clobber an input or another output,
``partition_folders`` that a partitioned output's folder names can exist. Imports
:mod:`pcem_spark.engine` (the session), :mod:`pcem_spark.core`,
:mod:`pcem_spark.util` and :mod:`pcem_spark.errors`.
"""

__all__: list = []
