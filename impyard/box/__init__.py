"""Docker boxes: the engine entry point, box specs, launch, overlay volumes, the check."""
