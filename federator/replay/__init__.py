"""federator.replay: replaying a GPU-cluster job trace in virtual time through federator and baselines.

`federator bench replay` (cli/bench.py) runs it. The pieces, bottom up:

    trace.py        the ITP trace's CSV files -> TraceJob
    clusters.py     the clusters YAML -> Federation (member clusters, their nodes, datasets)
    attributes.py   the seeded attribute rule: gang shape, dataset, network, GPU model, team (with
                    --queues also priority and checkpoint interval)
    backfill.py     FIFO with backfill, skipping shapes that failed in a pass
    queues.py       with --queues: one team queue per trace cluster, quota = its GPU-hour share
    member.py       a member cluster: the simulator's ledger and gang fit (federator/sim/fit.py)
    engine.py       the discrete-event loop and the metrics of one policy's run
    federated.py    the `federator` policy: placement.run_cycle over snapshots of the members
                    (`federator-queues`: the same with queues, preemptions carried out, victims
                    checkpoint-aware; `federator-queues-by-start`: victims by start, --compare-victims)
    policies.py     the baselines (MultiKueue, Karmada, Armada, none, first-fit, random), with sources
    run.py          validation, one process per policy, progress bar, report.json / report.md / plots

It may use placement (pure) and the simulator's pure fit code; it must
never import the hub's store, API server, controllers or member clients,
and never wait on a wall clock.
"""
