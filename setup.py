import re

from setuptools import find_packages, setup

# The version lives in one place, pcem_spark/__init__.py (pcem --version prints it).
with open("pcem_spark/__init__.py", encoding="utf-8") as fh:
    VERSION = re.search(r'^__version__ = "([^"]+)"', fh.read(), re.M).group(1)

setup(
    name="pcem-spark",
    version=VERSION,
    description="Path cost-sensitive naive Bayes and EM (WWW'19) for semi-supervised and "
    "weakly supervised hierarchical text classification on Apache Spark",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["pcem_spark", "pcem_spark.*"]),
    # the shipped defaults (read from the installed package, so they do not depend on the current folder)
    # and the quick start's sample documents (pcem quickstart)
    package_data={"pcem_spark": ["conf/defaults.toml", "examples/*.jsonl"]},
    python_requires=">=3.11",
    # pyarrow (+ pandas, which PySpark's mapInArrow imports): blocks and
    # predictions cross between the JVM and Python as Arrow batches, so no
    # Python object is built per document. pandas < 3: PySpark 4 warns that it
    # does not fully support 3.x yet.
    install_requires=["pyspark>=4.0", "numpy>=1.24", "scipy>=1.10", "pyarrow>=11", "pandas>=2.2,<3"],
    # matplotlib only draws the experiment report's figures (Figures 2-3 and
    # the efficiency chart); the tests cover them, so the test extra has it.
    # scikit-learn only for scripts/bench_noregret.py's peers (LogisticRegression, MultinomialNB,
    # SelfTrainingClassifier): what users compare against, never a runtime dependency.
    extras_require={
        "plots": ["matplotlib>=3.7"],
        # fasttext-community: the maintained fastText build with wheels (the fasttext
        # package on PyPI has none and needs a compiler); the no-regret benchmark's fastText peer.
        "bench": ["scikit-learn>=1.3", "fasttext-community>=0.11"],
        # venv-pack packs the executors' env for --archives (scripts/package.sh):
        # the tool Spark's Python packaging guide names for plain virtualenvs;
        # the cluster test builds that env, so the test extra has it too.
        "cluster": ["venv-pack>=0.2"],
        # Spark Connect's client (pyspark 4's "connect" extra minus what we already
        # require): only tests/test_connect.py uses it, to show what works over Connect.
        "connect": ["grpcio>=1.76.0", "grpcio-status>=1.76.0", "googleapis-common-protos>=1.71.0", "zstandard>=0.25.0"],
        # pcem ingest-warc (pcem_spark/warc.py): FastWARC reads WARC/WET records and
        # Resiliparse extracts the main text of HTML pages, both C++: on the same pages
        # (scripts/bench_warc.py) ~7x the pages/s per core of warcio + trafilatura.
        # Floors = what the tests passed with (2.0.1; older FastWARC has another API).
        # warcio reads ARC files (FastWARC reads none): Webrecorder's reader of WARC and
        # ARC, pure Python; 1.7 is the first with the arc2warc + no_record_parse used.
        "warc": ["fastwarc>=2.0.1", "resiliparse>=2.0.1", "warcio>=1.7"],
        # The user guide and API reference (scripts/build_docs.sh): Sphinx with autodoc and
        # numpydoc, the convention of pyspark and scikit-learn whose docstrings the package
        # follows; MyST reads the guide's Markdown, so README.md and docs/*.md stay the
        # pages GitHub shows and their links are checked at build time.
        "docs": ["sphinx>=8", "numpydoc>=1.8", "myst-parser>=4"],
        # python -m build and twine check of the distributions (scripts/check_dist.sh).
        "dist": ["build>=1.2", "twine>=6"],
        "test": [
            "pytest>=7",
            # pytest-xdist: scripts/test.sh runs two pytest workers, one file per worker at a time
            # (--dist loadfile); the tests' JVMs leave a third of the CPU idle (tests/conftest.py).
            "pytest-xdist>=3.5",
            "chispa>=0.10",
            # pytest-timeout: a test that hangs (a Spark Connect client once waited 66 minutes on a server
            # answer that never came) fails with every thread's stack after pyproject.toml's timeout, instead of
            # using up CI's 90 minutes; pytest-rerunfailures: the Connect tests' one rerun after such a timeout.
            "pytest-timeout>=2.3",
            "pytest-rerunfailures>=14.0",
            # lint and format (pyproject.toml), run by .ci/run; pinned to a minor version because
            # ruff changes its formatting style only between minor versions.
            "ruff>=0.17.6,<0.18",
            "matplotlib>=3.7",
            "venv-pack>=0.2",
            "grpcio>=1.76.0",
            "grpcio-status>=1.76.0",
            "googleapis-common-protos>=1.71.0",
            "zstandard>=0.25.0",
            "fastwarc>=2.0.1",
            "resiliparse>=2.0.1",
            # ARC files, and the reference the real-crawl tests compare ingest-warc with
            "warcio>=1.7",
        ],
        # dags/pcem_dag.py and tests/dags (scripts/test_airflow.sh installs it in its own
        # venv). Floors = what tests/dags passed with end to end: airflow 3.3.2 + provider
        # 6.3.4 (3.0.6 + 6.0.0 install and import the DAG, but dag.test() fails inside
        # Airflow there). The provider pulls in pyspark-client, whose files overwrite
        # pyspark's: reinstall pyspark after it (pip install --force-reinstall --no-deps
        # pyspark==<its version>; the script does).
        "airflow": ["apache-airflow>=3.3", "apache-airflow-providers-apache-spark>=6.3"],
    },
    entry_points={"console_scripts": ["pcem=pcem_spark.cli:main"]},
)
