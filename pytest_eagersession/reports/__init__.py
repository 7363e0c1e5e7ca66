"""Survivors turned into text: who holds each one, grouped, and the records reports are made of.

Reports carry only text, never the objects they describe.
"""
