"""The executor wire format: frames, their codec and what each SDK release supports. Pure: no I/O."""
