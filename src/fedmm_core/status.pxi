# SPDX-License-Identifier: BSD-3-Clause
# Included by every extension module: the one mapping from a kernel's status
# code (FEDMM_OK or a negative FEDMM_E*, fedmm_common.h) to a Python exception.
#   FEDMM_ELAPACK -> numpy.linalg.LinAlgError
#   FEDMM_ENOMEM  -> MemoryError
#   FEDMM_EINTR   -> the exception the signal poll left set (KeyboardInterrupt on Ctrl-C)
#   any other     -> ValueError
# (or the class the caller names, for a failure of its own kind).
# The message is "{what}: {reason}" (reason: fedmm_strerror(status)) unless the
# caller's `messages` maps that status to its own template ("{what}" and
# "{reason}" are filled in), so that each wrapper keeps its own wording.
from cpython.exc cimport PyErr_Occurred
from fedmm.fedmm_common cimport FEDMM_EINTR, FEDMM_ELAPACK, FEDMM_ENOMEM, FEDMM_OK, fedmm_strerror
from numpy.linalg import LinAlgError


cdef object status_error(int status, str what, dict messages=None, type cls=None):
    """The exception (not raised) of a failed kernel call: its class by ``status`` (``cls`` if given),
    its message as above."""
    template = messages.get(status) if messages is not None else None
    msg = (template or "{what}: {reason}").format(what=what, reason=fedmm_strerror(status).decode())
    if cls is not None:
        return cls(msg)
    if status == FEDMM_ELAPACK:
        return LinAlgError(msg)
    if status == FEDMM_ENOMEM:
        return MemoryError(msg)
    return ValueError(msg)


cdef int check_status(int status, str what, dict messages=None, type cls=None) except -1:
    """0 when ``status`` is ``FEDMM_OK``, else raise :func:`status_error`'s exception (``FEDMM_EINTR``
    with an exception set by the signal poll: that exception)."""
    if status == FEDMM_OK:
        return 0
    if status == FEDMM_EINTR and PyErr_Occurred() != NULL:
        return -1
    raise status_error(status, what, messages, cls)
