#!/usr/bin/python3
"""End-to-end checks of --metrics-port with a 2-rank job under mpirun.

    prometheus_scrape.py scrape PROMETHEUS MPIRUN TRAIN_RESNET WORK_DIR
    prometheus_scrape.py port-in-use MPIRUN TRAIN_RESNET WORK_DIR

scrape: starts the job (synthetic images, far more steps than it will take)
with --metrics-port P, so rank r serves P + r; starts the real Prometheus
server on a free port with a temporary config (scrape interval 1 s,
honor_labels as docs/metrics.md recommends) and storage folder; then asks
Prometheus' HTTP query API until both ranks' series have arrived with the
job, rank and world_size labels. Both process groups are killed at the end,
whatever happened.

port-in-use: holds rank 1's port, so rank 1 must fail naming it and rank 0
must stop too, both before training (Note [Monitoring starts on every rank
or on none]).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

JOB = "metrics_it"
START = time.time()


def log(msg):
    print(f"[{time.time() - START:6.1f}s] {msg}", flush=True)


def fail(msg):
    log("FAIL: " + msg)
    sys.exit(1)


def free_port_pair():
    """A port P with P and P + 1 both free on this machine."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("", 0))
            p = s.getsockname()[1]
        if p >= 65535:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("", p))
                b.bind(("", p + 1))
            return p
        except OSError:
            continue
    fail("no two consecutive free ports")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_env():
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")


def trainer_cmd(mpirun, train, port, steps):
    return [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", train, "--backend", "mpi",
            "--data", "synthetic", "--synthetic-size", "100000", "--image-size", "16",
            "--batch-size", "8", "--epochs", "1000", "--max-steps", str(steps), "--eval-limit", "8",
            "--log-every", "1",
            "--metrics-port", str(port), "--job-name", JOB]


def stop(proc):
    """SIGTERM the process group, then SIGKILL what is left after 10 s."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


def http_get(url, timeout=2):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def query(prom_port, promql):
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    reply = json.loads(http_get(url))
    if reply.get("status") != "success":
        fail(f"query {promql}: {reply}")
    return reply["data"]["result"]


def scrape(prometheus, mpirun, train, work):
    port, prom_port = free_port_pair(), free_port()
    job = prom = None
    job_log = open(os.path.join(work, "job.log"), "w")
    try:
        job = subprocess.Popen(trainer_cmd(mpirun, train, port, 100000), stdout=job_log,
                               stderr=subprocess.STDOUT, env=job_env(), start_new_session=True)
        # Both ranks serve before their first step.
        deadline = time.time() + 240
        for p in (port, port + 1):
            while True:
                if job.poll() is not None:
                    fail(f"the job exited with {job.returncode}:\n" + open(job_log.name).read()[-3000:])
                try:
                    if "ddp_step_seconds" in http_get(f"http://127.0.0.1:{p}/metrics"):
                        break
                except OSError:
                    pass
                if time.time() > deadline:
                    fail(f"port {p} never served /metrics")
                time.sleep(0.5)
        log(f"ok: ranks serve /metrics on {port} and {port + 1}")

        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: ddp\n    honor_labels: true\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{port}', "
                    f"'127.0.0.1:{port + 1}']\n")
        prom = subprocess.Popen([prometheus, f"--config.file={config}",
                                 f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "prometheus.log"), "w"),
                                start_new_session=True)
        deadline = time.time() + 240
        while True:
            if prom.poll() is not None:
                fail("prometheus exited:\n" + open(os.path.join(work, "prometheus.log")).read())
            if job.poll() is not None:
                fail(f"the job exited with {job.returncode}:\n" + open(job_log.name).read()[-3000:])
            try:
                steps = query(prom_port, f'ddp_steps_total{{job="{JOB}"}} > 0')
                ranks = sorted(r["metric"].get("rank", "") for r in steps)
                if ranks == ["0", "1"]:
                    break
                log(f"waiting for both ranks' series; have {ranks}")
            except OSError as e:  # Prometheus still starting
                log(f"waiting for Prometheus: {e}")
            if time.time() > deadline:
                targets = http_get(f"http://127.0.0.1:{prom_port}/api/v1/targets")
                fail("Prometheus never had ddp_steps_total of both ranks; its targets: " + targets +
                     "\nits log:\n" + open(os.path.join(work, "prometheus.log")).read()[-3000:])
            time.sleep(1)
        for r in steps:
            m = r["metric"]
            if m.get("world_size") != "2" or m.get("job") != JOB:
                fail(f"labels {m}")
        log(f"ok: Prometheus has ddp_steps_total of ranks 0 and 1: "
            f"{[(r['metric']['rank'], r['value'][1]) for r in steps]}")
        # The other series of both ranks arrived in the same scrapes.
        for promql in [f'ddp_step_seconds_count{{job="{JOB}"}}', f'ddp_loss{{job="{JOB}"}}',
                       f'ddp_allreduce_bytes_total{{job="{JOB}"}}',
                       f'ddp_peak_memory_bytes{{job="{JOB}"}}', f'ddp_restarts_total{{job="{JOB}"}}',
                       f'ddp_bucket_wait_seconds_bucket{{job="{JOB}",le="+Inf"}}']:
            result = query(prom_port, promql)
            if sorted(r["metric"]["rank"] for r in result) != ["0", "1"]:
                fail(f"{promql}: {result}")
        allreduced = query(prom_port, f'ddp_allreduce_bytes_total{{job="{JOB}"}}')
        if any(float(r["value"][1]) <= 0 for r in allreduced):
            fail(f"no allreduced bytes: {allreduced}")
        log("ok: step histogram, loss, allreduce bytes, memory, restarts and bucket waits of "
            "both ranks")
    finally:
        stop(prom)
        stop(job)
        log("stopped Prometheus and the job")
        job_log.close()


def port_in_use(mpirun, train, work):
    port = free_port_pair()
    holder = socket.socket()
    holder.bind(("", port + 1))  # rank 1's port
    holder.listen(1)
    try:
        res = subprocess.run(trainer_cmd(mpirun, train, port, 2), capture_output=True, text=True,
                             env=job_env(), timeout=240, start_new_session=True)
    finally:
        holder.close()
    out = res.stdout + res.stderr
    if res.returncode == 0:
        fail("the job succeeded although rank 1's port was taken:\n" + out)
    if f"port {port + 1} is already in use" not in out:
        fail(f"no message naming port {port + 1}:\n{out}")
    if "other rank" not in out:
        fail("rank 0 did not report the other rank's failure:\n" + out)
    if "step 1/" in out:
        fail("training started:\n" + out)
    log(f"ok: port {port + 1} in use stops both ranks before training")


def main():
    mode, rest = sys.argv[1], sys.argv[2:]
    work = rest[-1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if mode == "scrape":
        scrape(*rest[:3], work)
    else:
        port_in_use(*rest[:2], work)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
