"""VectorWorld: a streaming vector-graph world model for closed-loop driving rollouts.

(being built for issue 11; the public names are re-exported here as they land)
"""
