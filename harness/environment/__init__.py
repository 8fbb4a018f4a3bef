"""What a session starts from, read from a repository and the user's choices: the setup its layout
names (`detect`), a devcontainer.json read as hostile input (`devcontainer`, with `jsonc`, its
`features` fetched from their OCI `registry` only when pinned, a `compose` file's services), and the
hosted agents' images (`agents`: an agent's npm packages at pinned versions over the session's image).
Pure where it can be: text and files in, typed descriptions out; the engine's work is the root's."""
