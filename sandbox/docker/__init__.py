"""The container-engine side: one fresh hardened container per call on a Docker engine.

`containers` (DockerSandbox, the Sandbox protocol), `engine` (client, image lookup, error
translation), `pool` (pre-started single-use containers), `netns` (a session's empty network
namespace holder), `call` (the call watch that kills at the deadline), `hardening` (spec → engine
config), `images` (offline-built sandbox images), `step_images` (a session's committed images),
`prune` (leftovers of crashed runs and deleted sessions), `ids` (engine object ids). Nothing here imports `sandbox.session`.
"""
