"""The ``postroom`` command: an adapter over the public API (``postroom``, ``postroom.errors``,
``postroom.embedded``); it never reaches into the engines' internals."""
