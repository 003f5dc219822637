"""TEST IMAGES ONLY: keep the bytecode of what root imports from Ansible's module payload zips.

Every Ansible module runs from a zip of its own (AnsiballZ) and zipimport compiles each file it
imports from that zip on every run: on the test machine a third of a module's CPU (0.32 s for
ping, 0.21 s with this), on the same two cores as the controller and every other container.
build-images.sh installs this file with a .pth line into the test images' Python: root's imports
from a payload zip keep their code object in a root-only directory, keyed by the file's path in
the zip and its content. Any other user, archive or cache directory compiles as Python does.
Real nodes never have this file.
"""

import hashlib
import marshal
import os
import sys
import zipimport

CACHE = os.environ.get("GPUSERVE_TEST_ZIPIMPORT_CACHE", "/var/cache/gpuserve-test-zipimport")
_compile_source = zipimport._compile_source  # pylint: disable=protected-access


def _cache_is_roots_alone():
    try:
        st = os.lstat(CACHE)
    except FileNotFoundError:
        try:
            os.mkdir(CACHE, 0o700)
        except OSError:
            return False
        st = os.lstat(CACHE)
    except OSError:
        return False
    return st.st_uid == 0 and os.path.isdir(CACHE) and not os.path.islink(CACHE) and st.st_mode & 0o077 == 0


def _cached_compile_source(pathname, source):
    archive, sep, inner = pathname.partition(".zip" + os.sep)
    if not sep or os.geteuid() != 0 or not os.path.basename(archive).endswith("_payload") or not _cache_is_roots_alone():
        return _compile_source(pathname, source)
    tag = f"{sys.implementation.cache_tag}\0{marshal.version}\0{inner}\0".encode()
    cached = os.path.join(CACHE, hashlib.sha256(tag + source).hexdigest())
    try:
        with open(cached, "rb") as stream:
            code = marshal.load(stream)
    except (OSError, EOFError, ValueError, TypeError):
        code = _compile_source(pathname, source)
        partial = f"{cached}.{os.getpid()}.partial"
        try:
            with open(partial, "wb") as stream:
                marshal.dump(code, stream)
            os.replace(partial, cached)
        except OSError:  # a full disk: this run compiled; the next one tries again
            try:
                os.unlink(partial)
            except OSError:
                pass
        return code
    import _imp  # pylint: disable=import-outside-toplevel

    _imp._fix_co_filename(code, pathname)  # pylint: disable=protected-access
    return code


zipimport._compile_source = _cached_compile_source  # pylint: disable=protected-access
