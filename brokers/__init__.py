"""The outbound broker link: pooled connections to the brokers, the requests only a broker can
answer (schemas, non-persistent topics, creating partitioned topics), and its typed answers."""
