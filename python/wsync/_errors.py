"""wsync's exceptions: every failure of the C library, and every bad input
the binding refuses before calling it, is a WsyncError."""


class WsyncError(Exception):
    """A wsync failure.

    code     the result code's name, e.g. "WSYNC_ERR_CORRUPT" (wsync.h's
             WSYNC_RESULT_LIST)
    tensor   the tensor involved, or None
    offset   the byte offset in the input where it failed, or None
    message  the rule that failed, in words
    """

    def __init__(self, code, message, tensor=None, offset=None):
        self.code = code
        self.message = message
        self.tensor = tensor or None
        self.offset = offset
        Exception.__init__(self, code, message)

    def __str__(self):
        s = "%s: %s" % (self.code, self.message)
        if self.tensor and self.tensor not in self.message:
            s += " (tensor %r)" % self.tensor
        return s

    def __reduce__(self):
        return (type(self), (self.code, self.message, self.tensor, self.offset))


class WsyncTypeError(WsyncError, TypeError):
    """A WsyncError for an argument of the wrong type (also a TypeError)."""


class WsyncUnsupportedError(WsyncError, NotImplementedError):
    """A WsyncError for what this binding does not do, such as a CUDA
    tensor as a target of wsync.apply() or of Subscriber(..., mirror=False)
    (also a NotImplementedError)."""
