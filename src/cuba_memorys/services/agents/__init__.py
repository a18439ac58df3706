"""Several agents on one daemon: who am I to it (whoami), what should I see at the start of a
turn (contexto), and the text artifacts agents share (artifacts)."""
