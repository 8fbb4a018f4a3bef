"""(commands added by the issue that owns this module)"""
