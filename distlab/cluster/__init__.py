"""From laptop to cluster (lesson 09): one run config, and everything that carries it to a cluster.

- ``config``       the run config's schema: what a training run is, checked before anything starts;
                   ``config_sections`` its four training sections (a ``TrainSpec``'s, key for key)
- ``config_text``  its TOML form, ``--set`` overrides, and pydantic's errors said plainly
- ``run``          ``distlab run CONFIG``: the training a config describes, under torchrun or horovodrun
- ``job_files``    the same config as an Azure ML job, a SLURM script, a Kubernetes PyTorchJob, a Vertex AI job
- ``fake_nodes``   two "nodes" on one machine (network namespaces), for a real multi-node rendezvous
- ``config_rank``  one rank of a run config's training: what every scheduler starts
- ``vertex_node``  one node of a Vertex AI custom job, from ``CLUSTER_SPEC``
"""
