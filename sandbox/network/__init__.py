"""Network by allowlist: a session's containers have no route out; their only way is an egress
proxy that harness runs on the host for the session (`proxy`), reached through a Unix socket that a
relay inside each container (`relay`) serves on 127.0.0.1. The proxy resolves names itself, allows a
connection only to a listed host (`allow`) whose addresses are not private unless listed, checks that
a tunnel's TLS ClientHello names the same host (`hello`), and records every request (`log`).
`egress` starts and stops the proxy process with the session."""
