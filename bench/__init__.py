"""The performance benchmark (``make bench`` / ``python manage.py bench``): see
docs/PERFORMANCE.md. It needs the development dependencies (websockets, the test model
server's encoding)."""
