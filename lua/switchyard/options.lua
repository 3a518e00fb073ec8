-- switchyard.options: the shim's settings, with their defaults. The table
-- is switchyard.pick's module table too (balancer.configure sets its
-- fields), and every other module reads its settings here at run time.

local _M = {
  -- socket is the Go pick socket ("unix:/path").
  socket = "unix:/var/run/switchyard/pick.sock",
  -- timeout is how long a request waits for Go's answer, in seconds, before
  -- it falls back to the last peer list.
  timeout = 0.05,
  -- flush_interval bounds how long feedback waits for a pick to ride on.
  flush_interval = 0.1,
  -- max_queue bounds frames waiting to be written; beyond it feedback is
  -- dropped and picks fall back.
  max_queue = 10000,
  -- log_interval: each kind of trouble is logged at most once per interval.
  log_interval = 10,
  -- request_metrics: aggregate ingress-nginx's request metrics (count and
  -- duration histogram per host/status/method/path/namespace/ingress/
  -- service/canary, and the upstream connect times: count, sum and a
  -- sample) and send them to Go every flush_interval. Switchyard's own
  -- nginx.conf turns it on; in an ingress-nginx pod its monitor.lua does
  -- this job.
  request_metrics = false,
  -- metrics_per_host: label request metrics with $server_name.
  metrics_per_host = true,
}

return _M
