# Regressions for core bugs found in review; each failed on the code it
# guards against (crash, missing auth check, partial CONFIG SET, ...).

start_server {tags {regress}} {
    test {COMMAND GETKEYS with a huge numkeys is an error, not a crash} {
        assert_error {ERR*} {r command getkeys batch.put.start 4611686018427387905 a 1}
        assert_error {ERR*} {r command getkeys batch.put.start -1 a 1}
        r ping
    } {PONG}

    test {SCAN with the largest COUNT works} {
        r set sc:1 x
        lindex [r scan 0 COUNT 9223372036854775807] 0
    } {0}

    test {A refused CONFIG SET client-output-buffer-limit changes nothing} {
        set before [lindex [r config get client-output-buffer-limit] 1]
        assert_error {ERR*} {r config set client-output-buffer-limit "normal 100mb 50mb 10 replica abc 0 0"}
        lindex [r config get client-output-buffer-limit] 1
    } [lindex [r config get client-output-buffer-limit] 1]

    test {AUTH default with any password is accepted when no password is set} {
        assert_equal OK [r auth default whatever]
        r ping
    } {PONG}

    test {DEBUG SLEEP nan is refused} {
        assert_error {ERR*} {r debug sleep nan}
        r ping
    } {PONG}
}

start_server {tags {regress} overrides {requirepass secret}} {
    test {SHUTDOWN needs authentication} {
        set c [redis_client]
        assert_error {NOAUTH*} {$c shutdown}
        $c close
        r auth secret
        r ping
    } {PONG}
}

tags {mooncake} {
    start_server {tags {regress} overrides {enable-protected-configs yes}} {
        test {CONFIG SET dir with a space, and REWRITE writes a file that loads} {
            set d [file join [srv 0 dir] "a b"]
            file mkdir $d
            r config set dir $d
            assert_equal $d [lindex [r config get dir] 1]
            r config rewrite
            restart_server
            assert_equal $d [lindex [r config get dir] 1]
        }

        test {A heap argument past 4 GiB is refused, not fatal} {
            r config set proto-max-bulk-len 8gb
            set fd [raw_connect]
            puts -nonewline $fd "*2\r\n\$4\r\nECHO\r\n\$5000000000\r\n[string repeat x 1000]"
            flush $fd
            after 100
            close $fd
            r config set proto-max-bulk-len 1gb
            r ping
        } {PONG}
    }
}
