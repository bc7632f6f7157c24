"""Widgets: the pictures of the lessons, each drawn only from records of real runs.

One module per lesson's pictures; widgets read records and never train.
"""
