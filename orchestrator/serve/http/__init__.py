"""The HTTP edge: what every request passes before an API sees it.

=================  ==================================================================
module             what
=================  ==================================================================
``limits.py``      below the app: header size (431), slow heads (408), malformed HTTP
``auth.py``        API keys (401), the loopback rule
``guard.py``       each route's auth group (open, key, admin) applied in front of every handler
``hosts.py``       host names of a request or a bind address (pure)
``body.py``        the one body reader: size limit (413), timeout, decoding (415), JSON
``body_codec.py``  ``Content-Encoding`` under the same limit (pure)
``shapes.py``      the shape checker and request limits; each API declares its shape (pure)
=================  ==================================================================
"""
