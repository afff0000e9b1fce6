"""Shipping the recommended variant: an adapter, a merged model and a GGUF (export), served by llama.cpp's server on
127.0.0.1 and re-scored against the evaluated answers (winner). May import ``core``, ``data``, ``train``,
``evaluate`` and ``decide`` (the recommendation it ships)."""
