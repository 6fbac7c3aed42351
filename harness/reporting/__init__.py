"""Reports from run records: leaderboards, paper-style tables and figures, the drift gate."""
