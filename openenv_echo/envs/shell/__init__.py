"""shell: a real bash in a locked-down container, on tasks in Harbor's format (``tasks``)."""
