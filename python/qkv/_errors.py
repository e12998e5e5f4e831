"""qkv's own exception classes (the library's errors are otherwise Python's built-in ones)."""


class ShapeError(ValueError):
    """Shapes that do not fit together; the message is qkv's, naming the op and the shapes."""
