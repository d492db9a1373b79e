"""The only bridge between the core and Qt: the engine thread, its jobs and their messages."""
