"""The driving world: procedural lane graphs, batched IDM/MOBIL traffic, vector tiles.

(being built for issue 10; the public names are re-exported here as they land)
"""
