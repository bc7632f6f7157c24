"""One model split over the named mesh by ordered transforms, and trained by the one loop (lessons 12-13).

- ``transforms``  the ordered transforms (tensor, context, expert, pipeline, reduce) that split one rank's copy
- ``checks``      what a layout must satisfy, checked before any process starts
- ``watch``       what a transformer run writes down inside its steps (bytes, ring, activations, routing)
- ``trainer``     the line transformer trained on any data x pipeline x expert x context x tensor mesh, and the
                  one process it must equal
"""
