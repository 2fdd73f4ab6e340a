# A sysbatch job: runs once to completion on every node.
#   herder job run config/examples/cleanup.nomad.hcl
job "cleanup" {
  datacenters = ["dc1"]
  type        = "sysbatch"

  group "cleanup" {
    task "clean" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo cleaning on $NOMAD_ALLOC_ID; find \"$NOMAD_TASK_DIR\" -maxdepth 0"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
