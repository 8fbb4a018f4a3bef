"""Landing a night's verified work as branches of the original repository: new objects and a new
ref written by harness's own object writer, never the `git` binary and nothing the repository
configures (hooks, filters, attributes, config); the working tree, index and current branch are
never touched."""
