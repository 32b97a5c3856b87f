"""wsync's exceptions: every failure of the C library, and every bad input
the binding refuses before calling it, is a WsyncError."""
import re


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


class WsyncValueError(WsyncError, ValueError):
    """WSYNC_ERR_INVALID_ARGUMENT: an argument of the right type with a
    wrong value (out of range, empty, a NUL in a string, a step not above
    HEAD, a key of the wrong length), or a call on a closed object; the
    binding's own checks and the library's alike (also a ValueError)."""


class WsyncUnsupportedError(WsyncError, NotImplementedError):
    """A WsyncError for what this binding does not do, such as a CUDA
    tensor as a target of wsync.apply() or of Subscriber(..., mirror=False)
    (also a NotImplementedError)."""


class WsyncNoStoreError(WsyncError):
    """WSYNC_ERR_NO_STORE: the store does not exist (yet): a directory store
    whose directory is not there. A subscriber opened before its trainer
    raises this from sync() and keeps polling after start(): wait and retry."""


class WsyncNotFoundError(WsyncError):
    """WSYNC_ERR_NOT_FOUND: the store exists but the chain has nothing yet
    (nothing published), or an object or step asked for is not in it: wait
    and retry."""


WsyncEmptyChainError = WsyncNotFoundError


class WsyncLayoutError(WsyncError):
    """WSYNC_ERR_LAYOUT: the model does not match the chain (a target not in
    the chain, a chain tensor not among the targets with strict=True, a dtype
    or a shape that differs; the message gives expected and actual). Retrying
    does not help: stop."""


class WsyncStaleHeadError(WsyncError):
    """WSYNC_ERR_STALE_HEAD: HEAD names a step older than the one the
    targets hold (a stale cached HEAD, or a chain restarted at a lower step).
    The targets stay where they are; Subscriber(..., follow_restart=True)
    follows a restarted chain instead."""


class WsyncSignatureError(WsyncError):
    """WSYNC_ERR_SIGNATURE: a signed chain did not verify. A Subscriber with
    verify_key found HEAD unsigned, signed by another key, changed after it
    was signed, or of another chain than the one followed; a Publisher with
    sign_key found a chain it cannot continue (unsigned, another key's), or
    one without found a signed chain. The tensors stay where they were.
    Someone may be tampering with the store: do not retry blindly."""


# the class of each result code that has its own (the rest: WsyncError)
CLASSES = {
    "WSYNC_ERR_INVALID_ARGUMENT": WsyncValueError,
    "WSYNC_ERR_SIGNATURE": WsyncSignatureError,
    "WSYNC_ERR_NO_STORE": WsyncNoStoreError,
    "WSYNC_ERR_NOT_FOUND": WsyncNotFoundError,
    "WSYNC_ERR_LAYOUT": WsyncLayoutError,
    "WSYNC_ERR_STALE_HEAD": WsyncStaleHeadError,
}


def make(code, message, tensor=None, offset=None):
    """The WsyncError (or the subclass for code) for a failure."""
    return CLASSES.get(code, WsyncError)(code, message, tensor, offset)


# The C library's messages name C calls and flags; from Python, the Python
# call or option that does the same. Longest and most specific first.
_HINTS = [
    ("(wsync_chain_options.sign_key, wsync publish --sign-key)", "(Publisher(store, sign_key=...))"),
    ("(wsync_subscriber_set_chain_id to ", "(sub.set_chain_id(None) to "),
    ("(wsync_ed25519_keypair makes the 64 bytes)", "(wsync.keygen() makes a key file)"),
    ("(wsync keygen writes them)", "(wsync.keygen() writes them)"),
    ("(wsync_publisher_head, or wsync log, gives HEAD's step)",
     "(pub.head, or wsync.head(store), gives HEAD's step)"),
    ("WSYNC_CHAIN_NEW_CHAIN (wsync publish --new-chain)", "Publisher(store, new_chain=True)"),
    ("wsync_chain_options.sign_key", "sign_key"),
    ("wsync_chain_options.verify_key", "verify_key"),
    ("(wsync_chain_options.spool_dir, else $TMPDIR or /tmp)", "($TMPDIR, else /tmp)"),
    ("wsync_chain_options.spool_dir, else $TMPDIR or /tmp", "$TMPDIR, else /tmp"),
    ("WSYNC_CHAIN_NEW_CHAIN", "new_chain=True"),
    ("WSYNC_CHAIN_PARTIAL", "strict=False"),
    ("WSYNC_CHAIN_FOLLOW_RESTART", "follow_restart=True"),
    ("WSYNC_CHAIN_VERIFY_STATE", "verify_state=True"),
    ("WSYNC_CHAIN_KEEP_F32", "keep_f32=True"),
    ("WSYNC_STORE_NO_CREATE", "a subscriber's store"),
    ("wsync_dir_follower_open", "DirFollower()"),
    ("wsync_dir_follower_sync", "DirFollower.sync()"),
    ("wsync_dir_pull", "wsync.pull_dir()"),
    ("wsync_dir_read", "pub.publish_dir()"),
    ("wsync_dir_publish", "pub.publish_dir()"),
    ("wsync_publisher_head", "pub.head"),
    ("wsync_publisher_open", "Publisher()"),
    ("wsync_publish", "pub.publish()"),
    ("wsync_subscriber_open", "Subscriber()"),
    ("wsync_subscriber_sync", "sub.sync()"),
    ("wsync_subscriber_set_step", "sub.set_step()"),
    ("wsync_subscriber_set_chain_id", "sub.set_chain_id()"),
    ("wsync_subscriber_start", "sub.start()"),
    ("wsync_subscriber_apply_ready", "sub.apply_ready()"),
    ("wsync_subscriber_step", "sub.step"),
    ("wsync_mirror_open", "Subscriber()"),
    ("wsync_mirror_sync", "sub.sync()"),
    ("wsync_mirror_take", "sub.take()"),
    ("wsync_mirror_set_step", "sub.set_step()"),
    ("wsync_mirror_start", "sub.start()"),
    ("wsync_chain_read", "wsync.head()"),
    ("wsync_state_digest", "wsync.state_digest()"),
    ("wsync_delta_apply", "wsync.apply()"),
    ("wsync_delta_encode", "wsync.diff()"),
]


_HINT_RE = re.compile("|".join(re.escape(c) + (r"\b" if c[-1].isalnum() or c[-1] == "_" else "")
                               for c, _ in _HINTS))
_HINT_MAP = dict(_HINTS)


def python_message(message):
    """message with the C names it gives replaced by the Python call or
    option that does the same."""
    if "wsync_" not in message and "WSYNC_" not in message:
        return message
    return _HINT_RE.sub(lambda m: _HINT_MAP[m.group(0)], message)
