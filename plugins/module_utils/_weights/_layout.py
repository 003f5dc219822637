# Private to the gpuserve.vllm collection: not a public API, may change without notice.
"""Where one checkpoint revision lives on a host (`Layout`), and the errors of staging it.

The names every part of staging shares (_stage decides, _transfer fetches, _publish makes a
copy visible), so that _transfer and _publish need nothing of _stage, which uses them. Stdlib
only, no Ansible imports.
"""

from __future__ import annotations

import dataclasses
import os

META_DIR = ".gpuserve"
META_MANIFEST = f"{META_DIR}/manifest.json"


class StageError(RuntimeError):
    """Staging failed; the partial copy is kept so that the next run resumes it."""


class SpaceError(StageError):
    """Not enough free space; nothing was written."""


@dataclasses.dataclass(frozen=True)
class Layout:
    link: str
    final: str

    @property
    def partial(self) -> str:
        return self.final + ".partial"

    @property
    def link_target(self) -> str:
        """Relative, so the tree can be mounted elsewhere (a rescue system, a container)."""
        return os.path.relpath(self.final, os.path.dirname(self.link))


def layout(root: str, store_dir: str, name: str, commit: str) -> Layout:
    if not name or "/" in name or name.startswith("."):
        raise StageError(f"checkpoint name {name!r} must be a plain directory name")
    return Layout(os.path.join(os.path.abspath(root), name),
                  os.path.join(os.path.abspath(store_dir), name, commit))
