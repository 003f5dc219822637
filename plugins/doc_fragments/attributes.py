# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared attribute documentation for the gpuserve.vllm modules."""

from __future__ import annotations


class ModuleDocFragment:
    """Attributes every file-changing module of the collection declares."""

    # pylint: disable=too-few-public-methods

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
      - This assumes that the system controlled/queried by the module has not changed in a relevant way.
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
"""

    # For modules that only read: support is the same everywhere, so it is declared once here.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads; it runs and reports the same in check mode.
  diff_mode:
    support: none
    details: Nothing is changed, so there is no diff.
  idempotent:
    support: full
    details: The module never changes the node; C(changed) is always false.
  platform:
    support: full
    platforms: posix
"""
