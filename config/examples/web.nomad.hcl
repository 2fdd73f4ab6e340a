# A service that runs a real process: a tiny HTTP server on a dynamic port.
#   herder job run config/examples/web.nomad.hcl
job "web" {
  datacenters = ["dc1"]
  type        = "service"

  group "web" {
    count = 1

    network {
      port "http" {}
    }

    task "server" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "${NOMAD_PORT_http}", "--bind", "127.0.0.1"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
