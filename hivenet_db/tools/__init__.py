"""The tools: what the command, the benchmarks and the tests use beside the library, which
never imports them (``tests/test_layers.py``): the migration runner (``migrate``), the roles'
bootstrap (``bootstrap``), the local PostgreSQL used without a URL (``embedded_postgres``),
URL forms (``dburl``), the PL/Proxy install (``plproxy``, its SQL in ``plproxy_sql/``) and
the fields of ``/proc/<pid>/stat`` (``proc_stat``)."""
