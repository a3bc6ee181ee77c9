"""The runtime around the pure core: the lookup service (admission, authorization, metrics,
log throttling), the answer memo and the ownership watch. Above lookup/, below the protocol
floors that call it."""
