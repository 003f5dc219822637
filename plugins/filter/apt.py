# Copyright: gpuserve maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the roles that install from a repository the operator configures: which packages it lacks."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.vllm.plugins.module_utils import _apt


def apt_without_candidate(apt_policy: t.Any, packages: t.Any) -> list[str]:
    """apt-cache policy's stdout | apt_without_candidate(packages) -> the packages no configured source offers."""
    if not isinstance(apt_policy, str) or isinstance(packages, str) or not isinstance(packages, (list, tuple)):
        raise AnsibleFilterError("apt_without_candidate: expected apt-cache policy's output and a list of package "
                                 f"names, got {apt_policy!r} and {packages!r}")
    return _apt.without_candidate([str(name) for name in packages], apt_policy)


class FilterModule:
    """gpuserve.vllm apt filter."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"apt_without_candidate": apt_without_candidate}
