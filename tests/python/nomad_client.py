"""Drives herder with the python-nomad client (from PyPI) the way a user
of Nomad would: register a job, read it, list allocations, evaluations and
nodes, and deregister it. Reads NOMAD_ADDR. Exits non-zero with a message
on the first thing that does not behave as Nomad does."""

import os
import sys
from urllib.parse import urlparse

import nomad

JOB_ID = "python-nomad-example"

JOB = {
    "Job": {
        "ID": JOB_ID,
        "Name": JOB_ID,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [
            {
                "Name": "cache",
                "Count": 2,
                "Tasks": [
                    {
                        "Name": "redis",
                        "Driver": "exec",
                        "Config": {"command": "/bin/sleep", "args": ["3600"]},
                        "Resources": {"CPU": 100, "MemoryMB": 64},
                    }
                ],
            }
        ],
    }
}


def check(condition, message):
    if not condition:
        print("FAILED: " + message, file=sys.stderr)
        sys.exit(1)


def main():
    addr = urlparse(os.environ["NOMAD_ADDR"])
    n = nomad.Nomad(host=addr.hostname, port=addr.port, timeout=10)

    registered = n.job.register_job(JOB_ID, JOB)
    check(registered.get("EvalID"), "register answers an EvalID: %r" % registered)
    eval_id = registered["EvalID"]

    job = n.job.get_job(JOB_ID)
    check(job["ID"] == JOB_ID, "the job reads back: %r" % job.get("ID"))
    check(job["TaskGroups"][0]["Count"] == 2, "the count reads back")
    check(job["Priority"] == 50, "Nomad's default priority is filled in")
    check(JOB_ID in [j["ID"] for j in n.jobs.get_jobs()], "the job is listed")

    allocs = n.job.get_allocations(JOB_ID)
    check(isinstance(allocs, list), "job allocations are a list: %r" % allocs)
    check(isinstance(n.allocations.get_allocations(), list), "allocations are a list")

    evals = n.job.get_evaluations(JOB_ID)
    check(eval_id in [e["ID"] for e in evals], "the register eval is listed: %r" % evals)
    check(eval_id in [e["ID"] for e in n.evaluations.get_evaluations()], "eval in /v1/evaluations")
    check(n.evaluation.get_evaluation(eval_id)["JobID"] == JOB_ID, "the eval reads back")

    nodes = n.nodes.get_nodes()
    check(isinstance(nodes, list) and len(nodes) == int(os.environ["EXPECT_NODES"]),
          "the registered nodes are listed: %r" % nodes)

    deregistered = n.job.deregister_job(JOB_ID)
    check(deregistered.get("EvalID"), "deregister answers an EvalID: %r" % deregistered)
    check(n.job.get_job(JOB_ID)["Stop"] is True, "a deregistered job is stopped")

    n.job.deregister_job(JOB_ID, purge=True)
    try:
        n.job.get_job(JOB_ID)
        check(False, "a purged job is gone")
    except nomad.api.exceptions.URLNotFoundNomadException:
        pass
    print("python-nomad: all checks passed")


if __name__ == "__main__":
    main()
