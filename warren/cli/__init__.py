"""`warrenctl` and `warren-queues`: rabbitmqctl's and rabbitmq-queues' verbs, flags,
messages and tables, over the management API.

Theory of operation:
1. `main` parses rabbitmqctl's command line (`set_policy NAME PATTERN DEFINITION
   --apply-to queues`, `list_queues name messages -p VHOST --formatter=pretty_table`),
   with the global flags accepted before or after the verb; `commands` runs one verb as
   HTTP calls through `client` and prints with `formatters`, which draw rabbitmqctl's
   table, pretty_table, json and csv outputs (`terms` renders argument values the way
   each of them does).
   `queues` is rabbitmq-queues' command line on the same flags; `cluster` holds the
   cluster verbs of both.
2. It talks only HTTP (``--url``, else ``WARREN_URL``, else http://127.0.0.1:15672;
   credentials from the URL or guest/guest), so it works against Warren and against a
   RabbitMQ with the management plugin alike. It never imports broker internals.
3. Output follows rabbitmqctl 3.10.8: an informational banner on stdout (left out by
   ``-q``/``--quiet``, ``-s``/``--silent`` and the json formatter), ``-s`` also drops the
   header row of plain tables, errors go to stderr as ``Error:`` and a text, and exit
   codes are the sysexits rabbitmqctl uses (64 usage, 65 missing vhost, 69 refused).
"""
