"""The axes composed: a model split over the named mesh by ordered transforms (lessons 07, 09, 12-13).

- ``transforms``  the ordered transforms (tensor, context, expert, pipeline, reduce) that split one rank's copy
- ``checks``      what a layout must satisfy, checked before any process starts
- ``watch``       what a transformer run writes down inside its steps (bytes, ring, activations, routing)
- ``trainer``     the one trainer: the line transformer on any data x pipeline x expert x context x tensor mesh
                  (lesson 01's MLP on data x pipeline x tensor), and the one process it must equal
- ``workloads``   what differs between the two families of models: model, data, batches, test
- ``mesh_3d``     lesson 07's MLP on a data x pipeline x tensor grid (3D parallelism in miniature)
- ``registry``    every strategy a run config can name, in one table (lesson 09)
"""
