"""Framework-free pieces every layer may use: the error hierarchy, the boundary structs' base and
the wire's shared types. Nothing here imports Litestar or another part of the app."""
