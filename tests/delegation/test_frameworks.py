"""spec.framework: the environment the hub renders for a job equals what the Kubeflow operator renders for the same
job, and a gang's network identity (its headless Service, every pod's hostname and subdomain).

The operators name a peer by its per-replica Service (`<job>-<type>-<i>`, TFJob `<job>-<type>-<i>.<ns>.svc`,
the MPI operator `<job>-worker-<i>.<job>.<ns>.svc`); the hub by the pod's DNS name through the gang's headless
Service. `as_operator_names` maps the one to the other, and then the variables must be equal, name, value and
order. Each expected list is transcribed from the operator's code or its own test's example, cited where it is
(kubeflow/training-operator at tag v1.9.0, the last release with the v1 operators; kubeflow/mpi-operator v0.8.2).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from delegation_support import make_job

from federator.apis.trainingjob import validate_trainingjob
from federator.delegation import adapter_for
from federator.delegation.adapter import CONFIG_MAP_GVK, POD_GVK, SERVICE_GVK, MemberObject, service_name

JSON = dict[str, Any]
UID = "0d5b1e7f-3a20-4c8e-9a43-6f1c7a1e2b1d"
FEDERATOR_VARS = ("FEDERATOR_JOB_NAMESPACE", "FEDERATOR_JOB_NAME", "FEDERATOR_ROLE", "FEDERATOR_ROLE_INDEX",
                  "FEDERATOR_ROLE_REPLICAS", "FEDERATOR_GANG_SIZE", "FEDERATOR_EPOCH")


def role(name: str, replicas: int, **extra: Any) -> JSON:
    return {"name": name, "replicas": replicas, "template": {"image": "trainer:1.4"}, **extra}


def render(job: JSON, *, adapter: str = "volcano", namespace: str | None = None) -> list[MemberObject]:
    assert validate_trainingjob(job) == [], validate_trainingjob(job)
    ns = namespace or job["metadata"]["namespace"]
    return adapter_for(adapter).render(job, cluster_scheduler_name="volcano", epoch=0, hub_id="hub", namespace=ns)


def pod(objects: list[MemberObject], role_name: str, index: int) -> JSON:
    return next(o.body for o in objects if o.gvk == POD_GVK and o.labels["federator.dev/role"] == role_name
                and o.labels["federator.dev/index"] == str(index))


def as_operator_names(objects: list[MemberObject], text: str, form: str) -> str:
    """`text` with each pod's DNS name replaced by the operator's name for that replica (`form` takes job, role,
    index, ns)."""
    job = objects[0].labels["federator.dev/job-name"]
    for obj in objects:
        if obj.gvk != POD_GVK:
            continue
        spec = obj.body["spec"]
        ours = f"{obj.name}.{spec['subdomain']}.{obj.namespace}.svc"
        theirs = form.format(job=job, role=obj.labels["federator.dev/role"], index=obj.labels["federator.dev/index"],
                             ns=obj.namespace)
        text = text.replace(ours, theirs)
    return text


def framework_env(objects: list[MemberObject], role_name: str, index: int, form: str, container: int = 0
                  ) -> list[tuple[str, str]]:
    """The variables the framework added to one pod's container (after the job's FEDERATOR_* ones), with the
    operator's names for addresses; a valueFrom variable shows as its field path."""
    env = pod(objects, role_name, index)["spec"]["containers"][container]["env"]
    assert [e["name"] for e in env[:len(FEDERATOR_VARS)]] == list(FEDERATOR_VARS)
    return [(e["name"], as_operator_names(objects, e["value"], form) if "value" in e
             else "fieldRef:" + e["valueFrom"]["fieldRef"]["fieldPath"]) for e in env[len(FEDERATOR_VARS):]]


# ---------------------------------------------------------------- PyTorch


def test_pytorch_env_equals_the_pytorchjob_operators() -> None:
    # PyTorchJob "test-pytorchjob": Master 1, Worker 2, the default port (pytorch_types.go:29, 23456) and
    # nprocPerNode (pytorch_defaults.go:23 and :68-74, "auto"). training-operator v1.9.0
    # pkg/controller.v1/pytorch/envvar.go:49-124 (setPodEnv) and master.go:33-62: on every container, in order
    job = make_job(name="test-pytorchjob", namespace="default", uid=UID, framework="pytorch",
                   roles=[role("master", 1), role("worker", 2)])
    objects = render(job)
    base = [("PYTHONUNBUFFERED", "1"), ("MASTER_PORT", "23456"), ("PET_MASTER_PORT", "23456"),
            ("MASTER_ADDR", "test-pytorchjob-master-0"), ("PET_MASTER_ADDR", "test-pytorchjob-master-0"),
            ("WORLD_SIZE", "3")]
    tail = [("PET_NPROC_PER_NODE", "auto"), ("PET_NNODES", "3")]
    form = "{job}-{role}-{index}"
    # RANK: the master 0, worker i = i + 1 (envvar.go:77-83)
    assert framework_env(objects, "master", 0, form) == base + [("RANK", "0"), ("PET_NODE_RANK", "0")] + tail
    assert framework_env(objects, "worker", 1, form) == base + [("RANK", "2"), ("PET_NODE_RANK", "2")] + tail


def test_pytorch_elastic_env_equals_the_elastic_policys_and_adds_worker_0_as_master() -> None:
    # PyTorchJob "test-pytorchjob", Worker 2 with elasticPolicy minReplicas 1, maxReplicas 3 and no master:
    # envvar.go:99-123 and elastic.go:68-169 give PET_NPROC_PER_NODE, then PET_RDZV_ENDPOINT (worker 0 and the
    # port), PET_RDZV_BACKEND c10d, PET_NNODES "1:3" (the elastic test expects the same:
    # pytorchjob_controller_test.go:643-655)
    job = make_job(name="test-pytorchjob", namespace="default", uid=UID, framework="pytorch",
                   roles=[role("worker", 2, minReplicas=1, maxReplicas=3)])
    objects = render(job)
    form = "{job}-{role}-{index}"
    env = framework_env(objects, "worker", 1, form)
    operator = [("PYTHONUNBUFFERED", "1"), ("PET_NPROC_PER_NODE", "auto"),
                ("PET_RDZV_ENDPOINT", "test-pytorchjob-worker-0:23456"), ("PET_RDZV_BACKEND", "c10d"),
                ("PET_NNODES", "1:3")]
    assert [e for e in env if e[0] in dict(operator)] == operator
    # without a master the operator sets no MASTER_ADDR or RANK (envvar.go:67); the hub names worker 0, as
    # Trainer's TrainJob does (plugins/torch/torch.go: PET_MASTER_ADDR = node 0), so torchrun's static
    # rendezvous works too
    assert [e for e in env if e[0] not in dict(operator)] == [
        ("MASTER_PORT", "23456"), ("PET_MASTER_PORT", "23456"), ("MASTER_ADDR", "test-pytorchjob-worker-0"),
        ("PET_MASTER_ADDR", "test-pytorchjob-worker-0"), ("WORLD_SIZE", "2"), ("RANK", "1"), ("PET_NODE_RANK", "1")]


def test_pytorch_nproc_and_port_settings() -> None:
    job = make_job(uid=UID, framework="pytorch", frameworkSettings={"port": 29500, "nprocPerNode": "4"},
                   roles=[role("worker", 3)])
    env = dict(framework_env(render(job), "worker", 2, "{job}-{role}-{index}"))
    assert (env["MASTER_PORT"], env["WORLD_SIZE"], env["RANK"], env["PET_NPROC_PER_NODE"], env["PET_NNODES"]) == \
        ("29500", "12", "2", "4", "3")


# ---------------------------------------------------------------- TensorFlow


def test_tensorflow_tf_config_equals_the_tfjob_operators_example() -> None:
    # training-operator v1.9.0 pkg/controller.v1/tensorflow/pod_test.go:83-92: TFJob "test-tfjob" in namespace
    # ns3 with 1 worker, 1 ps, 1 evaluator; worker 0 gets exactly this TF_CONFIG (tensorflow.go:112-188)
    expected = ('{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],"ps":["test-tfjob-ps-0.ns3.svc:2222"],'
                '"worker":["test-tfjob-worker-0.ns3.svc:2222"]},"task":{"type":"worker","index":0},'
                '"environment":"cloud"}')
    job = make_job(name="test-tfjob", namespace="ns3", uid=UID, framework="tensorflow",
                   roles=[role("worker", 1), role("ps", 1), role("evaluator", 1)])
    objects = render(job)
    assert framework_env(objects, "worker", 0, "{job}-{role}-{index}.{ns}.svc") == [("TF_CONFIG", expected)]
    ps = json.loads(dict(framework_env(objects, "ps", 0, "{job}-{role}-{index}.{ns}.svc"))["TF_CONFIG"])
    assert ps["task"] == {"type": "ps", "index": 0}


def test_tensorflow_sets_tf_config_on_the_tensorflow_container_and_not_for_a_single_pod() -> None:
    # tfjob_controller.go:575-586 (only the container named "tensorflow"), util.go:74-95 (one pod: none)
    single = make_job(uid=UID, framework="tensorflow", roles=[role("worker", 1)])
    assert framework_env(render(single), "worker", 0, "{job}") == []
    job = make_job(uid=UID, framework="tensorflow", roles=[role("chief", 1), role("worker", 2)])
    objects = render(job)
    for obj in objects:
        if obj.gvk == POD_GVK:
            names = [e["name"] for e in obj.body["spec"]["containers"][0]["env"]]
            assert names.count("TF_CONFIG") == 1
    config = json.loads(dict(framework_env(objects, "worker", 1, "{job}-{role}-{index}"))["TF_CONFIG"])
    assert sorted(config["cluster"]) == ["chief", "worker"] and len(config["cluster"]["worker"]) == 2


# ---------------------------------------------------------------- PaddlePaddle


def test_paddle_parameter_server_env_equals_the_paddlejob_operators() -> None:
    # PaddleJob "test-paddle", Master 1 (parameter server mode), Worker 2, the default port
    # (paddlepaddle_types.go:29, 36543). training-operator v1.9.0 pkg/controller.v1/paddlepaddle/envvar.go:53-141
    # (setPodEnv), on every container; the master 0 gets its own IP (envvar.go:107-119, and the controller
    # test's expectation paddlepaddle_controller_test.go:140-148)
    job = make_job(name="test-paddle", namespace="default", uid=UID, framework="paddle",
                   roles=[role("master", 1), role("worker", 2)])
    objects = render(job)
    form = "{job}-{role}-{index}"
    head = [("PYTHONUNBUFFERED", "1"), ("PADDLE_JOB_ID", "test-paddle"), ("PADDLE_NNODES", "3")]
    master = framework_env(objects, "master", 0, form)
    worker = framework_env(objects, "worker", 1, form)
    assert master[:6] == head + [("POD_IP_DUMMY", "fieldRef:status.podIP"),
                                 ("PADDLE_MASTER", "$(POD_IP_DUMMY):36543"), ("PADDLE_SERVER_NUM", "1")]
    assert worker[:5] == head + [("PADDLE_MASTER", "test-paddle-master-0:36543"), ("PADDLE_TRAINER_NUM", "1")]
    # then what PaddlePaddle's PaddleCloudRoleMaker._ps_env reads (python/paddle/distributed/fleet/base/
    # role_maker.py), valued as the PaddlePaddle operator's Service intranet mode does (PaddleFlow/paddle-operator
    # controllers/paddlejob_helper.go constructPod / constructConfigMap): the pserver finds itself in the list
    assert dict(master[6:]) == {
        "TRAINING_ROLE": "PSERVER", "PADDLE_TRAINING_ROLE": "PSERVER", "PADDLE_TRAINER_ID": "0",
        "PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ENDPOINTS": "test-paddle-worker-0:36543,test-paddle-worker-1:36543",
        "PADDLE_TRAINERS": "test-paddle-worker-0,test-paddle-worker-1",
        "PADDLE_PSERVERS_IP_PORT_LIST": "test-paddle-master-0:36543", "PADDLE_PORT": "36543",
        "POD_IP": "test-paddle-master-0"}
    role_maker = dict(master[6:])
    assert f"{role_maker['POD_IP']}:{role_maker['PADDLE_PORT']}" in role_maker["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
    assert dict(worker[5:])["TRAINING_ROLE"] == "TRAINER" and dict(worker[5:])["PADDLE_TRAINER_ID"] == "1"


def test_paddle_collective_env_equals_the_paddlejob_operators() -> None:
    # no Master: collective mode, worker 0 is the rendezvous (envvar.go:74-99)
    job = make_job(name="test-paddle", namespace="default", uid=UID, framework="paddle",
                   roles=[role("worker", 2)])
    objects = render(job)
    form = "{job}-{role}-{index}"
    head = [("PYTHONUNBUFFERED", "1"), ("PADDLE_JOB_ID", "test-paddle"), ("PADDLE_NNODES", "2")]
    w0 = framework_env(objects, "worker", 0, form)
    w1 = framework_env(objects, "worker", 1, form)
    assert w0[:5] == head + [("POD_IP_DUMMY", "fieldRef:status.podIP"), ("PADDLE_MASTER", "$(POD_IP_DUMMY):36543")]
    assert w1[:4] == head + [("PADDLE_MASTER", "test-paddle-worker-0:36543")]
    # PaddleCloudRoleMaker._collective_env: PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT
    collective = dict(w1[4:])
    assert (collective["PADDLE_TRAINER_ID"], collective["PADDLE_CURRENT_ENDPOINT"]) == ("1", "test-paddle-worker-1:36543")
    assert collective["PADDLE_TRAINER_ENDPOINTS"] == "test-paddle-worker-0:36543,test-paddle-worker-1:36543"
    assert "PADDLE_PSERVERS_IP_PORT_LIST" not in collective


# ---------------------------------------------------------------- MPI


@pytest.mark.parametrize(("name", "namespace", "implementation", "slots", "expected_hostfile", "cite"), [
    # kubeflow/mpi-operator v0.8.2 pkg/controller/mpi_job_controller_test.go (TestNewConfigMap)
    ("openmpi-with-slots", "tenant-a", "OpenMPI", 10,
     "openmpi-with-slots-worker-0.openmpi-with-slots.tenant-a.svc slots=10\n", "mpi_job_controller_test.go:2181"),
    ("intelmpi-with-slots", "project-x", "Intel", 10,
     "intelmpi-with-slots-worker-0.intelmpi-with-slots.project-x.svc:10\n", "mpi_job_controller_test.go:2231"),
    ("mpich-with-slots", "project-x", "MPICH", 10,
     "mpich-with-slots-worker-0.mpich-with-slots.project-x.svc:10\n", "mpi_job_controller_test.go:2281"),
])
def test_mpi_hostfile_equals_the_mpi_operators(name: str, namespace: str, implementation: str, slots: int,
                                               expected_hostfile: str, cite: str) -> None:
    job = make_job(name=name, namespace=namespace, uid=UID, framework="mpi",
                   frameworkSettings={"slotsPerWorker": slots, "mpiImplementation": implementation},
                   roles=[role("launcher", 1), role("worker", 1)])
    objects = render(job)
    maps = [o for o in objects if o.gvk == CONFIG_MAP_GVK]
    assert len(maps) == 1, cite
    hostfile = as_operator_names(objects, maps[0].body["data"]["hostfile"], "{job}-{role}-{index}.{job}.{ns}.svc")
    assert hostfile == expected_hostfile, cite


def test_mpi_launcher_and_worker_env_equal_the_mpi_operators() -> None:
    # mpi_job_controller.go:169-219 (launcherEnvVars, ompiEnvVars, nvidiaDisableEnvVars) and :1610-1662
    # (newLauncherPodTemplate: Containers[0], the slots variable, the config volume at /etc/mpi); :1528-1532
    # (newWorker: K_MPI_JOB_ROLE=worker, sshd -De when the template gives no command) and :1520-1525 (search)
    job = make_job(name="pi", namespace="ns", uid=UID, framework="mpi", frameworkSettings={"slotsPerWorker": 2},
                   roles=[role("launcher", 1), role("worker", 2)])
    objects = render(job)
    launcher = framework_env(objects, "launcher", 0, "{job}-{role}-{index}.{job}.{ns}.svc")
    assert launcher == [("K_MPI_JOB_ROLE", "launcher"), ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile"),
                        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                        ("OMPI_MCA_orte_set_default_slots", "2"), ("NVIDIA_VISIBLE_DEVICES", ""),
                        ("NVIDIA_DRIVER_CAPABILITIES", "")]
    spec = pod(objects, "launcher", 0)["spec"]
    cm = next(o for o in objects if o.gvk == CONFIG_MAP_GVK)
    assert spec["volumes"] == [{"name": "mpi-job-config", "configMap": {
        "name": cm.name, "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}]}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "mpi-job-config", "mountPath": "/etc/mpi",
                                                      "readOnly": True}]
    assert as_operator_names(objects, cm.body["data"]["hostfile"], "{job}-{role}-{index}.{job}.{ns}.svc") == \
        "pi-worker-0.pi.ns.svc slots=2\npi-worker-1.pi.ns.svc slots=2\n"
    worker = pod(objects, "worker", 1)
    assert framework_env(objects, "worker", 1, "{job}") == [("K_MPI_JOB_ROLE", "worker")]
    assert worker["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
    svc = service_name(job_name="pi", job_uid=UID)
    assert worker["spec"]["dnsConfig"] == {"searches": [f"{svc}.ns.svc.cluster.local"]}
    assert cm.labels["federator.dev/job-uid"] == UID and cm.labels["federator.dev/epoch"] == "0"


# ---------------------------------------------------------------- JAX


def test_jax_env_equals_the_jaxjob_operators() -> None:
    # training-operator v1.9.0 pkg/controller.v1/jax/envvar.go:37-79 (setPodEnv) and envvar_test.go:70-75
    job = make_job(name="test-jaxjob", namespace="default", uid=UID, framework="jax",
                   frameworkSettings={"port": 6666}, roles=[role("worker", 2)])
    objects = render(job)
    assert framework_env(objects, "worker", 1, "{job}-{role}-{index}") == [
        ("PYTHONUNBUFFERED", "1"), ("COORDINATOR_PORT", "6666"), ("COORDINATOR_ADDRESS", "test-jaxjob-worker-0"),
        ("NUM_PROCESSES", "2"), ("PROCESS_ID", "1")]


# ---------------------------------------------------------------- env precedence and containers


def test_user_env_wins_and_the_federator_variables_stay() -> None:
    job = make_job(uid=UID, framework="pytorch", roles=[
        {"name": "worker", "replicas": 2, "template": {"image": "x", "env": [{"name": "MASTER_PORT", "value": "1"},
                                                                             {"name": "NCCL_DEBUG", "value": "INFO"}]}}])
    env = pod(render(job), "worker", 0)["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names[:len(FEDERATOR_VARS)] == list(FEDERATOR_VARS)
    assert [e for e in env if e["name"] == "MASTER_PORT"] == [{"name": "MASTER_PORT", "value": "1"}]
    assert len(names) == len(set(names)) and "MASTER_ADDR" in names and "RANK" in names


def test_no_framework_adds_nothing_but_the_network_identity() -> None:
    job = make_job(uid=UID, roles=[role("worker", 2)])
    objects = render(job)
    env = pod(objects, "worker", 1)["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == list(FEDERATOR_VARS)
    assert [o.kind for o in objects if o.gvk != POD_GVK] == ["PodGroup", "Service"]


# ---------------------------------------------------------------- network identity


@pytest.mark.parametrize("adapter", ["volcano", "coscheduling", "kube-batch", "native", "kai", "default"])
def test_every_gang_gets_a_headless_service_and_pods_a_stable_dns_name(adapter: str) -> None:
    job = make_job(uid=UID, framework="pytorch", roles=[role("master", 1), role("worker", 3)])
    objects = render(job, adapter=adapter, namespace="team-a")
    services = [o for o in objects if o.gvk == SERVICE_GVK]
    assert len(services) == 1
    svc = services[0]
    assert svc.name == service_name(job_name="resnet-ps", job_uid=UID) == "resnet-ps-" + svc.name.rsplit("-", 1)[1]
    assert svc.body["spec"]["clusterIP"] == "None" and svc.body["spec"]["publishNotReadyAddresses"] is True
    assert svc.body["spec"]["selector"] == {"federator.dev/hub": "hub", "federator.dev/job-uid": UID,
                                            "federator.dev/epoch": "0"}
    assert svc.body["spec"]["ports"] == [{"name": "pytorch", "port": 23456, "targetPort": 23456, "protocol": "TCP"}]
    pods = [o for o in objects if o.gvk == POD_GVK]
    for p in pods:
        assert (p.body["spec"]["hostname"], p.body["spec"]["subdomain"]) == (p.name, svc.name)
        # the Service selects exactly the gang's pods of this epoch
        assert all(p.labels[k] == v for k, v in svc.body["spec"]["selector"].items())
    # the Service comes before the pods (after the PodGroup), so the names resolve from the first moment
    kinds = [o.kind for o in objects]
    assert kinds.index("Service") < kinds.index("Pod")
    # every pod's MASTER_ADDR is the master's DNS name
    master = next(p for p in pods if p.labels["federator.dev/role"] == "master")
    addr = f"{master.name}.{svc.name}.team-a.svc"
    for p in pods:
        assert {"name": "MASTER_ADDR", "value": addr} in p.body["spec"]["containers"][0]["env"]


def test_the_service_name_is_the_same_at_every_epoch_and_a_dns_1035_label() -> None:
    job = make_job(uid=UID, roles=[role("worker", 1)])
    names = {next(o for o in adapter_for("volcano").render(
        job, cluster_scheduler_name="v", epoch=e, hub_id="hub", namespace="ns") if o.gvk == SERVICE_GVK).name
        for e in (0, 1, 7)}
    assert len(names) == 1
    # a job named from a digit, and the longest job name, still give a DNS-1035 label of at most 63 characters
    for name in ("9lives", "j" + "-x" * 31, "a" * 63):
        svc = service_name(job_name=name, job_uid=UID)
        assert len(svc) <= 63 and svc[0].isalpha() and svc[-1].isalnum(), svc
    assert service_name(job_name="a", job_uid=UID) != service_name(job_name="a", job_uid=UID + "x")
