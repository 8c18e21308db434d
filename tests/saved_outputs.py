"""Helpers for tests that edit a saved output by hand, as an older pcem-spark would have written it."""

import json
import os


def drop_manifest(output_dir):
    """Remove the manifest from an output's marker: what pcem-spark wrote before manifests (read by folder),
    so without the checksums and the marker's own seal that came after them.

    Needed after editing a file of the output: its size no longer matches the manifest, and a reader would
    rightly call the output damaged."""
    marker_file = os.path.join(output_dir, "_PCEM_COMPLETE")
    with open(marker_file, encoding="utf-8") as fh:
        marker = json.load(fh)
    for key in ("manifest", "checksums", "marker_sha256"):
        marker.pop(key, None)
    with open(marker_file, "w", encoding="utf-8") as fh:
        json.dump(marker, fh)
    crc = os.path.join(output_dir, "._PCEM_COMPLETE.crc")
    if os.path.exists(crc):
        os.remove(crc)
