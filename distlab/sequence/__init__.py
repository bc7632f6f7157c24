"""Sequences across ranks (lesson 12, long lines: splitting the heads and the sequence).

- ``lines``        lines of handwritten digits with a check digit, made on each rank from the real digits
- ``transformer``  the small transformer that reads them (pre-norm blocks, attention written out)
"""
