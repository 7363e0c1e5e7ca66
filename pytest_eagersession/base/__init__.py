"""The package's vocabulary, in plain Python: errors, the Java enums, sizes, supported versions.

The lowest layer: it imports nothing else of the package, and never TensorFlow.
"""
