# MONITOR: the line format (time, client address or unix socket, quoted and
# escaped arguments), passwords redacted, transactions shown as Redis shows
# them, what is not shown (administrative and refused commands), a slow
# monitor cut off by its output limit; and CLIENT REPLY ON|OFF|SKIP. Tests
# without the mooncake tag are Redis 7 behaviour and pass against
# redis-server too.

# A deferring client in MONITOR mode.
proc monitor_client {} {
    set mon [redis_deferring_client]
    $mon monitor
    assert_equal OK [$mon read]
    return $mon
}

# The next monitor line without its time and client: {"set" "k" "v"}.
proc monitor_next {mon} {
    set line [$mon read]
    if {![regexp {^[0-9]+\.[0-9]{6} \[0 [^\]]+\] (.*)$} $line -> args]} {
        fail "not a monitor line: $line"
    }
    return $args
}

start_server {tags {monitor}} {
    test {MONITOR streams commands in Redis's format} {
        set mon [monitor_client]
        r set foo bar
        r get foo
        set line [$mon read]
        regexp {addr=127\.0\.0\.1:([0-9]+)} [r client info] -> port
        assert_match "*\\\[0 127.0.0.1:$port\\\] \"set\" \"foo\" \"bar\"" $line
        assert {[regexp {^[0-9]{10}\.[0-9]{6} \[} $line]}
        assert_equal {"get" "foo"} [monitor_next $mon]
        $mon close
    }

    test {MONITOR escapes binary arguments} {
        set mon [monitor_client]
        r set "a b" "x\"y\\z\n\r\t\x00\xff"
        assert_equal {"set" "a b" "x\"y\\z\n\r\t\x00\xff"} [monitor_next $mon]
        $mon close
    }

    test {MONITOR shows unix socket clients as unix:<path>} {
        set mon [monitor_client]
        set u [redis_client_unix]
        $u ping
        set line [$mon read]
        $u close
        $mon close
        assert_match "*\\\[0 unix:[srv 0 unixsocket]\\\] \"ping\"" $line
    }

    test {MONITOR redacts AUTH and HELLO passwords} {
        set mon [monitor_client]
        set c [redis_client]
        catch {$c auth secret1}
        catch {$c auth default secret2}
        $c hello 3 auth default secret3 setname monname
        $c hello 2
        $c close
        assert_equal {"auth" "(redacted)"} [monitor_next $mon]
        assert_equal {"auth" "(redacted)" "(redacted)"} [monitor_next $mon]
        assert_equal {"hello" "3" "auth" "(redacted)" "(redacted)" "setname" "monname"} [monitor_next $mon]
        assert_equal {"hello" "2"} [monitor_next $mon]
        $mon close
    }

    test {MONITOR shows a transaction as MULTI, its commands when EXEC runs them, then EXEC} {
        set mon [monitor_client]
        set other [redis_client]
        r multi
        r set t 1
        $other ping
        r get t
        r exec
        $other close
        assert_equal {"multi"} [monitor_next $mon]
        assert_equal {"ping"} [monitor_next $mon]
        assert_equal {"set" "t" "1"} [monitor_next $mon]
        assert_equal {"get" "t"} [monitor_next $mon]
        assert_equal {"exec"} [monitor_next $mon]
        $mon close
    }

    test {MONITOR shows an aborted transaction as MULTI and EXEC} {
        set mon [monitor_client]
        r multi
        r set t 2
        catch {r nosuchcommand}
        catch {r exec}
        r ping
        assert_equal {"multi"} [monitor_next $mon]
        assert_equal {"exec"} [monitor_next $mon]
        assert_equal {"ping"} [monitor_next $mon]
        $mon close
    }

    test {MONITOR does not show administrative or refused commands} {
        set mon [monitor_client]
        r config get maxclients
        catch {r nosuchcommand x}
        catch {r set onlyone}
        r echo marker
        assert_equal {"echo" "marker"} [monitor_next $mon]
        $mon close
    }

    test {A monitor's own commands are shown; keyspace commands are refused to it} {
        set mon [monitor_client]
        $mon ping
        # The command's line comes after its reply, as in Redis.
        assert_equal PONG [$mon read]
        assert_equal {"ping"} [monitor_next $mon]
        $mon get foo
        assert_error {*Replica can't interact with the keyspace*} {$mon read}
        # MONITOR again: ignored, no reply.
        $mon monitor
        $mon echo again
        assert_equal again [$mon read]
        assert_equal {"echo" "again"} [monitor_next $mon]
        $mon close
    }

    test {RESET ends MONITOR mode} {
        set mon [monitor_client]
        $mon reset
        assert_equal RESET [$mon read]
        r set afterreset 1
        $mon ping
        assert_equal PONG [$mon read]
        $mon close
    }

    test {CLIENT LIST flags a monitor with O} {
        set mon [monitor_client]
        set found 0
        foreach l [split [r client list] "\n"] {
            if {[string match "*flags=O*" $l] && [string match "*cmd=monitor*" $l]} { set found 1 }
        }
        $mon close
        set found
    } {1}

    test {A monitor that does not read is disconnected at its output buffer limit} {
        set mon [redis_deferring_client]
        $mon client id
        set id [$mon read]
        $mon monitor
        assert_equal OK [$mon read]
        set before [s client_output_buffer_limit_disconnections]
        # Monitors are bounded by the normal class in Redis and by the
        # pubsub class here (monitor.c): limit both.
        r config set client-output-buffer-limit "normal 256kb 0 0 pubsub 256kb 0 0"
        set v [string repeat x 10000]
        set w [redis_deferring_client]
        for {set i 0} {$i < 3000} {incr i} { $w set mon:big $v }
        for {set i 0} {$i < 3000} {incr i} { $w read }
        $w close
        wait_for_condition 100 20 {[r client list id $id] eq ""} else {
            fail "the monitor was not disconnected"
        }
        if {![server_is_redis]} {
            assert_morethan [s client_output_buffer_limit_disconnections] $before
        }
        r config set client-output-buffer-limit "normal 0 0 0 pubsub 32mb 8mb 60"
        $mon close
    }
}

start_server {tags {monitor mooncake} overrides {segment-size 16mb}} {
    test {Arguments of 32 KiB or more are shown by their length} {
        set mon [monitor_client]
        set v [pattern_bytes 40000 1]
        # Read in place into the pool (SET), and held in the heap (ECHO).
        r set big $v
        r echo $v
        r set small [string range $v 0 99]
        assert_equal {"set" "big" "(40000 bytes)"} [monitor_next $mon]
        assert_equal {"echo" "(40000 bytes)"} [monitor_next $mon]
        assert_match {"set" "small" "*"} [monitor_next $mon]
        # Inside a transaction, when EXEC runs the command.
        r multi
        r set big2 $v
        r exec
        assert_equal {"multi"} [monitor_next $mon]
        assert_equal {"set" "big2" "(40000 bytes)"} [monitor_next $mon]
        assert_equal {"exec"} [monitor_next $mon]
        $mon close
    }

    test {A monitor is bounded by the pubsub class even when normal clients are not} {
        assert_match {normal 0 0 0 slave * pubsub 33554432 8388608 60} [lindex [r config get client-output-buffer-limit] 1]
        set mon [redis_deferring_client]
        $mon client id
        set id [$mon read]
        $mon monitor
        assert_equal OK [$mon read]
        r config set client-output-buffer-limit "pubsub 256kb 0 0"
        set v [string repeat y 10000]
        set w [redis_deferring_client]
        for {set i 0} {$i < 3000} {incr i} { $w set mon:big $v }
        for {set i 0} {$i < 3000} {incr i} { $w read }
        $w close
        wait_for_condition 100 20 {[r client list id $id] eq ""} else {
            fail "the monitor was not disconnected"
        }
        r config set client-output-buffer-limit "pubsub 32mb 8mb 60"
        $mon close
    }

    test {MIGRATE passwords are redacted} {
        set mon [monitor_client]
        catch {r migrate 127.0.0.1 1 k 0 100 COPY AUTH pw1}
        catch {r migrate 127.0.0.1 1 k 0 100 AUTH2 user pw2 KEYS}
        assert_equal {"migrate" "127.0.0.1" "1" "k" "0" "100" "COPY" "AUTH" "(redacted)"} [monitor_next $mon]
        assert_equal {"migrate" "127.0.0.1" "1" "k" "0" "100" "AUTH2" "(redacted)" "(redacted)" "KEYS"} [monitor_next $mon]
        $mon close
    }

    test {MOUNT's TOKEN (a segment's capability) is redacted} {
        set mon [monitor_client]
        set tok [string repeat 5a 16]
        set slower [lindex [r config get slowlog-log-slower-than] 1]
        r config set slowlog-log-slower-than 0
        r slowlog reset
        r mount mon-seg 1mb ENDPOINT tcp://127.0.0.1:1 TOKEN $tok OWNER mon-owner
        assert_equal {"mount" "mon-seg" "1mb" "ENDPOINT" "tcp://127.0.0.1:1" "TOKEN" "(redacted)" "OWNER" "mon-owner"} [monitor_next $mon]
        $mon close
        set logged [lsearch -inline -index 3 [r slowlog get -1] {mount *}]
        r config set slowlog-log-slower-than $slower
        r unmount mon-seg
        list [string first $tok $logged] [lindex $logged 3 6]
    } {-1 (redacted)}

    test {CONFIG SET's requirepass and masterauth values are redacted in SLOWLOG} {
        set slower [lindex [r config get slowlog-log-slower-than] 1]
        r config set slowlog-log-slower-than 0
        r slowlog reset
        r config set masterauth pw-secret-1 masteruser repl-user
        r config set requirepass pw-secret-2
        r auth pw-secret-2
        r config set requirepass ""
        set masterauth [r config get masterauth]
        r config set masterauth ""
        r config set slowlog-log-slower-than $slower
        set logged [r slowlog get -1]
        list [string first pw-secret $logged] \
            [lindex [lsearch -inline -index 3 $logged {config set masterauth * masteruser *}] 3] $masterauth
    } {-1 {config set masterauth (redacted) masteruser repl-user} {masterauth pw-secret-1}}
}

# ---- CLIENT REPLY --------------------------------------------------------------

start_server {tags {monitor client}} {
    test {CLIENT REPLY OFF: no replies until CLIENT REPLY ON} {
        set c [redis_deferring_client]
        $c client reply off
        $c set creply 1
        $c get creply
        $c nosuchcommand
        $c client reply on
        assert_equal OK [$c read]
        $c get creply
        assert_equal 1 [$c read]
        $c close
    }

    test {CLIENT REPLY SKIP: the next command only} {
        set c [redis_deferring_client]
        $c client reply skip
        $c set creply 2
        $c get creply
        assert_equal 2 [$c read]
        $c close
    }

    test {CLIENT REPLY SKIP while OFF stays OFF} {
        set c [redis_deferring_client]
        $c client reply off
        $c client reply skip
        $c ping
        $c ping
        $c client reply on
        assert_equal OK [$c read]
        $c close
    }

    test {CLIENT REPLY with a wrong mode} {
        assert_error {ERR syntax error*} {r client reply maybe}
        assert_equal OK [r client reply on]
    }

    test {RESET turns replies back on} {
        set c [redis_deferring_client]
        $c client reply off
        $c reset
        assert_equal RESET [$c read]
        $c ping
        assert_equal PONG [$c read]
        $c close
    }

    test {COMMAND DOCS of CLIENT REPLY} {
        set d [dict get [r command docs client] client subcommands client|reply]
        assert_equal 3.2.0 [dict get $d since]
        set a [lindex [dict get $d arguments] 0]
        assert_equal on_off_skip [dict get $a name]
        assert_equal oneof [dict get $a type]
        set tokens {}
        foreach t [dict get $a arguments] { lappend tokens [dict get $t token] }
        assert_equal {ON OFF SKIP} $tokens
    }
}

start_server {tags {monitor mooncake} overrides {requirepass secret}} {
    test {SLOWLOG keeps no passwords: AUTH and HELLO AUTH arguments are "(redacted)", as MONITOR shows them} {
        r auth secret
        r config set slowlog-log-slower-than 0
        r slowlog reset
        r auth default secret
        r hello 2 auth default secret
        set log [r slowlog get 10]
        r config set slowlog-log-slower-than 10000
        assert_no_match "*secret*" $log
        set auth {}
        foreach e $log {
            if {[string equal -nocase [lindex $e 3 0] auth]} { set auth [lindex $e 3] }
        }
        assert_equal {(redacted) (redacted)} [lrange $auth 1 end]
    }
}
