"""The warm service: a resident process that keeps hardened single-use containers started before a
one-shot command needs them (`harness warm start`; see `service`). `protocol` is what a client
needs to talk to it, and imports nothing but the standard library, so a client starts fast."""
