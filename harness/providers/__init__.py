"""Model providers: the `Provider` seam (`protocol`), its config models (`config`), the factory
(`factory`), the single retry policy (`retry`) and pricing (`pricing`).

`make_provider("openai:gpt-4.1" | "anthropic:MODEL" | "scripted:FILE" | "replay:SESSION", config,
api_key=...)` builds one; the SDK-backed modules are imported only when named. Import from the
submodules: this package imports nothing, so naming one provider never loads the others.
"""
