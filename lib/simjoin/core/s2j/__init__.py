"""S2J, the general stream join operator (Wang et al., *S2J: A General Operator for Stream Join in
the Cloud*): theta join tasks (``task``), the indexed join kernel over tuple blocks (``join``),
adaptation to the workload - workers, load shedding, tuple-block size (``adapt``) - and the
operator's steps on one stream pair (``operator``), with a brute-force reference (``bruteforce``)."""
