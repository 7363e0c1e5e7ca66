"""The session core: the port of TensorFlow Java's ``EagerSession``, with tracking and cleanup.

Which session owns each new object, the native references and their registry, the three
cleanup strategies (the ``IN_BACKGROUND`` thread and the byte watch it paces), what survives a
session, and eager operations built in one.
"""
