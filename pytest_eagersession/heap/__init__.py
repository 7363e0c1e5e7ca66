"""The heap, seen safely from any thread: listings, the line between sessions, walks and proofs.

Listing the heap without holding other code's objects while another thread runs; the forward
walk that finds who holds an object; the backward proof that no root holds one; the proof that
a few objects are cyclic garbage. Plain Python: no TensorFlow.
"""
