# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the node-side textfile scripts share (gpuserve_gpu_metrics.py, gpuserve_router_workers.py).

Installed beside them by gpuserve.vllm.monitoring (root's, read-only to others); they run under the
system python and import nothing from the collection.
"""

from __future__ import annotations

import os
import tempfile


def label(value: object) -> str:
    """A Prometheus label value, escaped."""
    return str(value).strip().replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def write_atomic(path: str, text: str) -> None:
    """Replace path with text through a temporary file in its directory: node_exporter never reads half of it."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gpuserve.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
