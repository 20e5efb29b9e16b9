"""Node telemetry: node tokens, the agent report endpoint, and what the agents observed."""
