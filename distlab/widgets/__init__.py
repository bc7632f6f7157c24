"""Widgets: the pictures of lessons 00 to 05, each drawn only from records of real runs.

``display`` (lesson 01) holds what every picture shares: the palette, the sizes, figure to
PNG, and ``LiveFigure`` (controls above a picture).  Then one module per lesson's pictures:
``data_parallel`` (00, 01), ``backends`` (02), ``collectives`` and ``costs`` (03),
``timeline`` (04), ``speedup`` (05).  Widgets read records and never train: a "measure"
button calls a function the lesson hands it.
"""
