"""`federator up`: run the hub (API server, leadership, controllers) until Ctrl-C.

With no flags it is a development hub: sqlite store in ./.federator/, HTTPS on
127.0.0.1:6443 with a CA and certificate generated under the state dir, a
generated token file, and two kubeconfigs (admin, and researcher in namespace
`default`) written next to them, plus simulated member clusters from
clusterconfigs/sim/ registered with the hub (unless --clusters DIR or
--no-sim). This module only declares the flags; the work is in
federator/hub/app.py and federator/dev/clusters.py.
"""

from __future__ import annotations

import argparse
from typing import Any

from federator.cli.common import etcd_tls_flags


def register(sub: Any) -> None:
    p = sub.add_parser(
        "up",
        help="run the hub: its Kubernetes-style API (TrainingJob, MemberCluster) and controllers",
        description=(
            "Run the federator hub until interrupted (Ctrl-C or SIGTERM stop it cleanly). "
            "With no TLS flags and no --token-file it runs in development mode: it generates a CA and "
            "server certificate, a token file and two kubeconfigs (STATE_DIR/admin.kubeconfig, "
            "STATE_DIR/researcher.kubeconfig for namespace default) and prints how to use them."
        ),
        epilog="Example: federator up; export KUBECONFIG=.federator/admin.kubeconfig; kubectl get tj -A. "
               "A flag marked [setting NAME] sets that hub setting; README.md's 'Hub settings' table lists every "
               "setting with its unit and default (federator/controllers/settings.py).",
    )
    p.add_argument(
        "--store", default=None,
        help="store URL: sqlite://PATH (default: sqlite://STATE_DIR/hub.db, i.e. sqlite://.federator/hub.db), "
             "etcd://HOST:PORT[,HOST:PORT...] (plain gRPC), etcds://HOST:PORT[,HOST:PORT...] (mutual TLS: with "
             "--etcd-cafile, --etcd-certfile and --etcd-keyfile), or memory://. The hub's leader election runs "
             "on the same store",
    )
    p.add_argument("--state-dir", default=".federator",
                   help="where the hub keeps its dev certificates, token file, kubeconfigs, simulated clusters' "
                        "kubeconfigs and (unless --store says otherwise) its sqlite store (default: .federator)")
    p.add_argument("--listen", default="127.0.0.1:6443", metavar="HOST:PORT",
                   help="address of the HTTPS API (default: 127.0.0.1:6443; port 0 picks a free one)")
    p.add_argument("--tls-cert", metavar="FILE", help="server certificate (PEM); with --tls-key, no dev CA is made")
    p.add_argument("--tls-key", metavar="FILE", help="server private key (PEM)")
    p.add_argument("--tls-ca", metavar="FILE",
                   help="CA (PEM) to put into generated kubeconfigs when --tls-cert is given")
    p.add_argument("--token-file", metavar="FILE",
                   help="bearer tokens in kube-apiserver --token-auth-file format (token,user,uid,\"groups\"); "
                        "groups federator:admin | federator:researcher + ns:NAMESPACE | federator:viewer. "
                        "Default: a generated STATE_DIR/tokens.csv")
    p.add_argument("--clusters", metavar="DIR",
                   help="apply every MemberCluster registration (*.yaml, *.yml, *.json) in DIR at start "
                        "(real clusters: no simulated clusters are started)")
    p.add_argument("--log-level", default=argparse.SUPPRESS, choices=["debug", "info", "warning", "error"],
                   help="log verbosity (default: info)")
    ha = p.add_argument_group("high availability (README: Running replicas)")
    ha.add_argument("--leader-ttl", default="10s", metavar="DURATION",
                    help="lease of the hub leadership: a leader that stops renewing it (killed, paused, cut off "
                         "from the store) is replaced by another replica on the same etcd within about this long; "
                         "shorter means faster takeover and more store traffic (default: 10s, 1s to 5m)")
    store = p.add_argument_group("store")
    etcd_tls_flags(store, who="the hub's")
    store.add_argument("--encryption-provider-config", default=None, metavar="FILE",
                       help="encrypt resources at rest in the store, as kube-apiserver's flag of that name: an "
                            "EncryptionConfiguration (apiserver.config.k8s.io/v1; providers aesgcm, secretbox, "
                            "identity; the first writes, all read), e.g. examples/encryption-config.yaml for "
                            "memberclusters.federator.dev (their credentials). After a key rotation run "
                            "`federator store rewrite`. A file that cannot be used stops the hub with one line")
    store.add_argument("--compaction-interval", default="5m", metavar="DURATION",
                       help="the store keeps DURATION of history (up to 1.2x): the leading hub compacts older "
                            "revisions every fifth of it (kube-apiserver's --etcd-compaction-interval, whose "
                            "default this is; sqlite also gives the space back); a watch or paged list older than "
                            "that gets 410 Expired and re-lists; 0 keeps all history (default: 5m) "
                            "[setting compaction_interval_seconds]")
    p.add_argument("--namespaces", default="lifecycle", choices=["lifecycle", "autoprovision"],
                   help="a create in a namespace that does not exist: lifecycle answers 404 NotFound as kube does "
                        "(create the Namespace first: kubectl create namespace NAME, or put it in the manifest); "
                        "autoprovision creates the namespace first (kube's NamespaceAutoProvision, the hub's "
                        "behaviour before it served Namespaces). A Terminating namespace refuses new objects "
                        "either way (default: lifecycle) [setting namespaces]")
    p.add_argument("--currency", default="USD", metavar="CODE",
                   help="the hub's one currency, an ISO 4217 code (three uppercase letters): every MemberCluster "
                        "GPU-hour price (spec.cost) is in it, and Queue budgets in money and status.spend are "
                        "counted in it; a Queue budget in another currency is not enforced and its "
                        "OverBudget condition is Unknown (CurrencyMismatch) (default: USD) [setting currency]")
    failover = p.add_argument_group("failover (docs/failover.md)")
    failover.add_argument("--cluster-loss-grace", default="60s", metavar="DURATION",
                          help="a cluster out of contact this long, from its first failed contact, is Lost and its "
                               "gangs fail over; a MemberCluster's spec.failover.gracePeriodSeconds overrides it "
                               "(default: 60s) [setting cluster_loss_grace_seconds]")
    failover.add_argument("--member-lease-duration", default=None, metavar="DURATION",
                          help="leaseDurationSeconds of the fencing Lease the hub renews in every member (every "
                               "third of it, at most 5s apart); the member's `federator agent` deletes this hub's "
                               "pods when it is not renewed that long, so a hub down longer than this loses its "
                               "running gangs: run replicas (default: each cluster's loss grace) "
                               "[setting member_lease_duration_seconds]")
    failover.add_argument("--lease-margin", default="5s", metavar="DURATION",
                          help="added to the lease before a lost cluster's gangs start elsewhere: the agent's poll "
                               "interval, its deletes and clock-rate drift (default: 5s) "
                               "[setting member_lease_margin_seconds]")
    failover.add_argument("--mass-loss-threshold", default="0.5", metavar="FRACTION",
                          help="when at least this share of the clusters (and at least 2) are lost within one grace "
                               "window, the hub assumes it is itself cut off and moves nothing (default: 0.5) "
                               "[setting mass_loss_threshold]")
    failover.add_argument("--failover-rate", default="20", metavar="GANGS_PER_SECOND",
                          help="at most this many gangs fail over per second (default: 20) [setting failover_rate]")
    inventory = p.add_argument_group("cluster inventory (README: Joining clusters from an inventory)")
    inventory.add_argument("--cluster-profile-providers", default=None, metavar="FILE",
                           help="access-provider file (JSON, sigs.k8s.io/cluster-inventory-api's format: "
                                "{\"providers\": [{\"name\": ..., \"execConfig\": {\"apiVersion\": "
                                "\"client.authentication.k8s.io/v1\", \"command\": ..., \"args\": [...], \"env\": "
                                "[...], \"provideClusterInfo\": true}}]}): a ClusterProfile whose "
                                "status.accessProviders lists one of these names joins as a MemberCluster whose "
                                "credentials the hub gets by running that plugin (the first match in file order) "
                                "[setting cluster_profile_providers]")
    inventory.add_argument("--cluster-profile-kubeconfigs", default=None, metavar="DIR",
                           help="kubeconfig Secrets mounted on the hub: a ClusterProfile NS/NAME that no provider "
                                "matches joins with DIR/NS/NAME/Config as its kubeconfig (mount the Secret, data "
                                "key Config, at DIR/NS/NAME) [setting cluster_profile_kubeconfig_dir]")
    audit = p.add_argument_group("audit log (docs/audit.md)")
    audit.add_argument("--audit-log-path", default=None, metavar="FILE",
                       help="write an audit log in kube-apiserver's format (audit.k8s.io/v1 Event objects, one "
                            "JSON per line) to FILE; - is stdout. Every API request (who, verb, object, response "
                            "code) and every write of the hub's controllers to a member cluster (Metadata, user "
                            "system:federator:controller, annotations federator.dev/cluster and "
                            "federator.dev/reason). Credentials and tokens are never written (bodies are redacted "
                            "as the API redacts them). Off without this flag")
    audit.add_argument("--audit-policy-file", default=None, metavar="FILE",
                       help="which requests to log at which level (None, Metadata, Request, RequestResponse): a "
                            "Policy in kube's format (apiVersion audit.k8s.io/v1, kind Policy, rules; the first "
                            "matching rule wins; examples/audit-policy.yaml). Default: Metadata for everything but "
                            "the health probes, /metrics and the hub's fencing-Lease renewals, RequestReceived "
                            "omitted. A policy that does not parse stops the hub with one line naming the field")
    audit.add_argument("--audit-log-maxsize", default=0, type=int, metavar="MB",
                       help="rotate the audit log when it would grow past MB megabytes: FILE is renamed "
                            "NAME-<UTC time>.EXT (kube's lumberjack naming) and a new one begun (default: 0, never)")
    audit.add_argument("--audit-log-maxbackup", default=0, type=int, metavar="N",
                       help="rotated audit files kept; older ones are removed (default: 0, keep all)")
    audit.add_argument("--audit-log-maxage", default=0, type=int, metavar="DAYS",
                       help="rotated audit files older than DAYS are removed (default: 0, keep all)")
    from federator.dev.clusters import add_arguments as add_devcluster_arguments

    add_devcluster_arguments(p)  # --no-sim, --sim-profile, --sim-port-base, --sim-ephemeral, --sim-run-seconds
    p.set_defaults(handler=_cmd_up)


def _cmd_up(args: argparse.Namespace) -> int:
    # Simulated member clusters next to the hub unless --clusters or --no-sim (federator/dev/clusters.py).
    from federator.dev.clusters import run_up

    return run_up(args)
