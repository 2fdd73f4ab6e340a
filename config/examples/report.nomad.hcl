# A batch job that runs to completion.
#   herder job run config/examples/report.nomad.hcl
job "report" {
  datacenters = ["dc1"]
  type        = "batch"

  group "report" {
    task "build" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo building report for $NOMAD_JOB_NAME; sleep 2; echo done"]
      }

      resources {
        cpu    = 100
        memory = 32
      }
    }
  }
}
