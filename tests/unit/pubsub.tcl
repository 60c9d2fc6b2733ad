# Pub/Sub: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UNSUBSCRIBEs, PUBLISH,
# SPUBLISH, PUBSUB, the RESP2 subscribed context, RESP3 pushes among
# replies, subscriptions ending with RESET and disconnects, CLIENT LIST's
# view of subscribers, the pubsub output buffer limit, and redis-py.
#
# Untagged tests are Redis 7.0's behaviour and pass against redis-server
# too (./tests/runtest --server-binary /usr/bin/redis-server --single
# unit/pubsub).

# A deferring client subscribed to the given channels, confirmations read.
proc subscribed_client {kind args} {
    set c [redis_deferring_client]
    $c $kind {*}$args
    foreach ch $args { read_with_timeout $c }
    return $c
}

# Waits until the subscribers of earlier tests are gone (a client's close
# reaches the server a moment after the test closed it).
proc wait_no_subscribers {} {
    wait_for_condition 50 20 {[r pubsub numpat] == 0 && [r pubsub channels] eq {} &&
                              [r pubsub shardchannels] eq {}} else {
        fail "subscribers of earlier tests are still there"
    }
}

# Reads n replies/messages.
proc read_n {c n} {
    set out {}
    for {set i 0} {$i < $n} {incr i} { lappend out [read_with_timeout $c] }
    return $out
}

start_server {tags {pubsub}} {
    test {SUBSCRIBE confirms each channel with the running count} {
        set c [redis_deferring_client]
        $c subscribe chan:a chan:b chan:a
        set got [read_n $c 3]
        $c close
        set got
    } {{subscribe chan:a 1} {subscribe chan:b 2} {subscribe chan:a 2}}

    test {PUBLISH reaches every subscriber and counts them} {
        set c1 [subscribed_client subscribe news]
        set c2 [subscribed_client subscribe news other]
        assert_equal 2 [r publish news hello]
        assert_equal 0 [r publish nobody hello]
        assert_equal {message news hello} [read_with_timeout $c1]
        assert_equal {message news hello} [read_with_timeout $c2]
        assert_equal 1 [r publish other x]
        assert_equal {message other x} [read_with_timeout $c2]
        $c1 close
        $c2 close
    }

    test {Messages are binary-safe and arrive in order} {
        set c [subscribed_client subscribe "ch \x00\r\n bin"]
        set msgs [list "a b" "\x00\xff\r\n" "" [string repeat x 100000]]
        foreach m $msgs { assert_equal 1 [r publish "ch \x00\r\n bin" $m] }
        foreach m $msgs {
            assert_equal [list message "ch \x00\r\n bin" $m] [read_with_timeout $c]
        }
        $c close
    }

    test {UNSUBSCRIBE named channels, then all, then none left} {
        set c [subscribed_client subscribe a b c]
        $c unsubscribe b nosuch
        assert_equal {{unsubscribe b 2} {unsubscribe nosuch 2}} [read_n $c 2]
        # All that is left, in no particular order, counting down.
        $c unsubscribe
        set rest [read_n $c 2]
        assert_equal {a c} [lsort [list [lindex $rest 0 1] [lindex $rest 1 1]]]
        assert_equal {1 0} [list [lindex $rest 0 2] [lindex $rest 1 2]]
        assert_equal 0 [r publish a x]
        # Nothing left: one confirmation with a nil channel.
        $c unsubscribe
        assert_equal {unsubscribe {} 0} [read_with_timeout $c]
        $c punsubscribe
        assert_equal {punsubscribe {} 0} [read_with_timeout $c]
        $c close
    }

    test {After the last UNSUBSCRIBE the RESP2 connection runs any command again} {
        set c [subscribed_client subscribe a]
        $c unsubscribe a
        read_with_timeout $c
        $c ping
        assert_equal PONG [read_with_timeout $c]
        $c set pubsub:after ok
        assert_equal OK [read_with_timeout $c]
        $c close
    }

    test {PSUBSCRIBE: glob patterns, pmessage, counts shared with channels} {
        set c [redis_deferring_client]
        $c subscribe news.tech
        $c psubscribe news.* n?ws.tech {[xy]z} {esc\*}
        set got [read_n $c 5]
        assert_equal {{subscribe news.tech 1} {psubscribe news.* 2} {psubscribe n?ws.tech 3} {psubscribe {[xy]z} 4} {psubscribe {esc\*} 5}} $got
        # The channel subscriber and both matching patterns: three deliveries.
        assert_equal 3 [r publish news.tech hi]
        set m [read_n $c 3]
        assert_equal {message news.tech hi} [lindex $m 0]
        assert_equal {{pmessage n?ws.tech news.tech hi} {pmessage news.* news.tech hi}} [lsort [lrange $m 1 2]]
        assert_equal 1 [r publish yz x]
        assert_equal {pmessage {[xy]z} yz x} [read_with_timeout $c]
        assert_equal 0 [r publish zz x]
        assert_equal 1 [r publish esc* x]
        assert_equal {pmessage {esc\*} esc* x} [read_with_timeout $c]
        assert_equal 0 [r publish escX x]
        $c punsubscribe news.*
        assert_equal {punsubscribe news.* 4} [read_with_timeout $c]
        $c punsubscribe
        assert_equal 3 [llength [read_n $c 3]]
        assert_equal 1 [r publish news.tech again]
        assert_equal {message news.tech again} [read_with_timeout $c]
        $c close
    }

    test {Payloads of every size, channels and patterns in turn, RESP2 and RESP3 alike} {
        # The frame's head is reused from one message to the next when it
        # can be, a small payload is sent inside it: every switch of
        # channel, pattern and size must still give the exact message.
        set c [redis_deferring_client]
        $c subscribe fr.a
        $c psubscribe fr.* fx.*
        read_n $c 3
        set c3 [redis_deferring_client]
        $c3 hello 3
        read_with_timeout $c3
        $c3 subscribe fr.a
        read_with_timeout $c3
        set big [string repeat x 5000]
        set edge [string repeat y 1024]
        set over [string repeat z 1025]
        foreach {ch msg} [list fr.a one fr.a $big fx.b two fr.a $edge fr.a $over fr.a {} fx.b $big fr.a three] {
            if {$ch eq "fr.a"} {
                assert_equal 3 [r publish $ch $msg]
                assert_equal [list message fr.a $msg] [read_with_timeout $c]
                assert_equal [list pmessage fr.* fr.a $msg] [read_with_timeout $c]
                assert_equal [list message fr.a $msg] [read_with_timeout $c3]
            } else {
                assert_equal 1 [r publish $ch $msg]
                assert_equal [list pmessage fx.* $ch $msg] [read_with_timeout $c]
            }
        }
        $c close
        $c3 close
    }

    test {PUBSUB CHANNELS, NUMSUB and NUMPAT count what clients listen to} {
        set c1 [subscribed_client subscribe intro:a intro:b]
        set c2 [subscribed_client subscribe intro:a]
        set c3 [subscribed_client psubscribe intro:* other:*]
        set c4 [subscribed_client psubscribe intro:*]
        assert_equal {intro:a intro:b} [lsort [r pubsub channels intro:*]]
        assert_equal {intro:b} [r pubsub channels *b]
        assert_equal {intro:a 2 intro:b 1 intro:none 0} [r pubsub numsub intro:a intro:b intro:none]
        assert_equal {} [r pubsub numsub]
        # Distinct patterns, however many clients use each.
        assert_equal 2 [r pubsub numpat]
        $c1 close
        $c2 close
        $c3 close
        $c4 close
        wait_for_condition 50 20 {[r pubsub numpat] == 0 && [llength [r pubsub channels intro:*]] == 0} else {
            fail "closed subscribers still counted"
        }
        assert_equal {intro:a 0} [r pubsub numsub intro:a]
    }

    test {PUBSUB and (UN)SUBSCRIBE errors as Redis words them} {
        assert_error {ERR wrong number of arguments for 'subscribe' command} {r subscribe}
        assert_error {ERR wrong number of arguments for 'psubscribe' command} {r psubscribe}
        assert_error {ERR wrong number of arguments for 'publish' command} {r publish a}
        assert_error {ERR wrong number of arguments for 'pubsub' command} {r pubsub}
        assert_error {ERR wrong number of arguments for 'pubsub|numpat' command} {r pubsub numpat x}
        assert_error {ERR unknown subcommand 'foo'. Try PUBSUB HELP.} {r pubsub foo}
        assert_error {ERR unknown subcommand or wrong number of arguments for 'channels'. Try PUBSUB HELP.} {r pubsub channels a b}
        assert_match {PUBSUB <subcommand>*} [lindex [r pubsub help] 0]
    }

    test {RESP2 subscribed context: only (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT, RESET} {
        set c [subscribed_client subscribe ctx]
        foreach {cmd name} {{get x} get {set x 1} set {client list} client|list {publish ctx m} publish} {
            $c {*}$cmd
            assert_error "ERR Can't execute '$name': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context" {read_with_timeout $c}
        }
        # An unknown command or a wrong arity is reported as such first.
        $c nosuchcmd
        assert_error {ERR unknown command*} {read_with_timeout $c}
        $c get
        assert_error {ERR wrong number of arguments for 'get' command} {read_with_timeout $c}
        # PING answers like a message: [pong, argument or ""].
        $c ping
        assert_equal {pong {}} [read_with_timeout $c]
        assert_equal {*2} [$c lastheader]
        $c ping hello
        assert_equal {pong hello} [read_with_timeout $c]
        $c psubscribe p*
        assert_equal {psubscribe p* 2} [read_with_timeout $c]
        $c ssubscribe sh
        assert_equal {ssubscribe sh 1} [read_with_timeout $c]
        $c quit
        assert_equal OK [read_with_timeout $c]
        $c close
    }

    test {RESET ends every subscription silently; the connection is ordinary again} {
        set c [subscribed_client subscribe r1 r2]
        $c psubscribe r*
        read_with_timeout $c
        $c reset
        assert_equal RESET [read_with_timeout $c]
        assert_equal {r1 0 r2 0} [r pubsub numsub r1 r2]
        assert_equal 0 [r publish r1 x]
        $c get pubsub:nokey
        assert_equal {} [read_with_timeout $c]
        $c close
    }

    test {A closed subscriber is unsubscribed} {
        set c [subscribed_client subscribe gone]
        assert_equal {gone 1} [r pubsub numsub gone]
        $c close
        wait_for_condition 50 20 {[lindex [r pubsub numsub gone] 1] == 0} else {
            fail "the closed client is still subscribed"
        }
        r publish gone x
    } {0}

    test {RESP3: confirmations and messages are pushes; other commands run between them} {
        set c [redis_deferring_client]
        $c hello 3
        read_with_timeout $c
        $c subscribe r3
        assert_equal {subscribe r3 1} [read_with_timeout $c]
        assert_equal {>3} [$c lastheader]
        $c set r3:key v
        assert_equal OK [read_with_timeout $c]
        assert_equal 1 [r publish r3 one]
        $c get r3:key
        # The message was queued before GET ran: it comes first, as a push.
        assert_equal {message r3 one} [read_with_timeout $c]
        assert_equal {>3} [$c lastheader]
        assert_equal v [read_with_timeout $c]
        assert_equal {$1} [$c lastheader]
        $c ping
        assert_equal PONG [read_with_timeout $c]
        # Its own PUBLISH: the push is queued before the reply.
        $c publish r3 self
        assert_equal {message r3 self} [read_with_timeout $c]
        assert_equal {>3} [$c lastheader]
        assert_equal 1 [read_with_timeout $c]
        $c psubscribe r*
        assert_equal {psubscribe r* 2} [read_with_timeout $c]
        r publish r3 two
        assert_equal {message r3 two} [read_with_timeout $c]
        assert_equal {pmessage r* r3 two} [read_with_timeout $c]
        assert_equal {>4} [$c lastheader]
        $c unsubscribe
        assert_equal {unsubscribe r3 1} [read_with_timeout $c]
        $c punsubscribe
        assert_equal {punsubscribe r* 0} [read_with_timeout $c]
        $c unsubscribe
        assert_equal {unsubscribe {} 0} [read_with_timeout $c]
        $c close
    }

    test {SSUBSCRIBE, SPUBLISH, SUNSUBSCRIBE: shard channels, counted apart} {
        set c [redis_deferring_client]
        $c subscribe plain
        $c ssubscribe sh1 sh2
        assert_equal {{subscribe plain 1} {ssubscribe sh1 1} {ssubscribe sh2 2}} [read_n $c 3]
        assert_equal 1 [r spublish sh1 m]
        assert_equal {smessage sh1 m} [read_with_timeout $c]
        # Separate namespaces: a channel named sh1 has no subscriber.
        assert_equal 0 [r publish sh1 m]
        assert_equal {sh1} [r pubsub shardchannels sh1*]
        assert_equal {sh1 1 sh2 1 plain 0} [r pubsub shardnumsub sh1 sh2 plain]
        assert_equal {} [r pubsub channels sh*]
        $c sunsubscribe sh1
        assert_equal {sunsubscribe sh1 1} [read_with_timeout $c]
        $c sunsubscribe
        assert_equal {sunsubscribe sh2 0} [read_with_timeout $c]
        $c sunsubscribe
        assert_equal {sunsubscribe {} 0} [read_with_timeout $c]
        # Still subscribed to plain: the RESP2 context holds.
        $c get x
        assert_error {ERR Can't execute*} {read_with_timeout $c}
        $c close
    }

    test {INFO stats counts channels, patterns and shard channels} {
        wait_no_subscribers
        set c [subscribed_client subscribe i1 i2]
        $c psubscribe ip*
        $c ssubscribe is1
        read_n $c 2
        set info [r info stats]
        assert_match "*pubsub_channels:2\r\n*" $info
        assert_match "*pubsub_patterns:1\r\n*" $info
        assert_match "*pubsubshard_channels:1\r\n*" $info
        $c close
    }

    test {CLIENT LIST: flag P, sub= psub= ssub=, TYPE pubsub; CLIENT KILL TYPE pubsub} {
        wait_no_subscribers
        set c [subscribed_client subscribe l1 l2]
        $c psubscribe lp*
        $c ssubscribe ls
        read_n $c 2
        $c client id
        # In RESP2 subscribed mode CLIENT is refused: find it from outside.
        assert_error {ERR Can't execute*} {read_with_timeout $c}
        set line [lindex [split [string trim [r client list type pubsub]] "\n"] 0]
        assert_match {*flags=P *} $line
        assert_match {* sub=2 psub=1 ssub=1 *} $line
        assert_no_match "*id=[r client id] *" [r client list type pubsub]
        assert_match "*id=[r client id] *" [r client list type normal]
        assert_no_match {*flags=P*} [r client list type normal]
        assert_match {* sub=0 psub=0 ssub=0 *} [r client info]
        assert_error {ERR Unknown client type 'foo'} {r client list type foo}
        assert_equal {} [r client list type master]
        assert_equal 1 [r client kill type pubsub]
        wait_for_condition 50 20 {[r pubsub numsub l1] eq {l1 0}} else {
            fail "CLIENT KILL TYPE pubsub left the subscriber"
        }
        catch {$c close}
    }

    test {COMMAND INFO: pubsub flags as Redis 7.0} {
        set out {}
        foreach cmd {subscribe psubscribe unsubscribe punsubscribe publish} {
            set info [lindex [r command info $cmd] 0]
            lappend out [lindex $info 1] [lsort [lindex $info 2]]
        }
        set out
    } {-2 {loading noscript pubsub stale} -2 {loading noscript pubsub stale} -1 {loading noscript pubsub stale} -1 {loading noscript pubsub stale} 3 {fast loading pubsub stale}}

    test {COMMAND INFO: SSUBSCRIBE and SPUBLISH name channels where keys go (not_key)} {
        set info [lindex [r command info spublish] 0]
        assert_equal {1 1 1} [lrange $info 3 5]
        set spec [lindex [lindex $info 8] 0]
        dict get $spec flags
    } {not_key}

    test {COMMAND DOCS: SUBSCRIBE, UNSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB as Redis 7.0} {
        set out {}
        foreach cmd {subscribe unsubscribe punsubscribe publish ssubscribe spublish} {
            set d [dict get [r command docs $cmd] $cmd]
            lappend out $cmd [dict get $d group] [docs_shape {*}[dict get $d arguments]]
        }
        set subs [dict get [dict get [r command docs pubsub] pubsub] subcommands]
        foreach sub {pubsub|channels pubsub|numsub pubsub|shardchannels pubsub|shardnumsub} {
            lappend out $sub [docs_shape {*}[dict get [dict get $subs $sub] arguments]]
        }
        set out
    } {subscribe pubsub {{name channel type string flags multiple}} unsubscribe pubsub {{name channel type string flags {multiple optional}}} punsubscribe pubsub {{name pattern type pattern flags {multiple optional}}} publish pubsub {{name channel type string} {name message type string}} ssubscribe pubsub {{name shardchannel type string flags multiple}} spublish pubsub {{name shardchannel type string} {name message type string}} pubsub|channels {{name pattern type pattern flags optional}} pubsub|numsub {{name channel type string flags {multiple optional}}} pubsub|shardchannels {{name pattern type pattern flags optional}} pubsub|shardnumsub {{name shardchannel type string flags {multiple optional}}}}

    tags {mooncake} {
        test {COMMAND DOCS psubscribe: one repeated argument of type pattern (Redis 7.2's shape)} {
            set d [dict get [r command docs psubscribe] psubscribe]
            docs_shape {*}[dict get $d arguments]
        } {{name pattern type pattern flags multiple}}

        test {client-max-subscriptions bounds one connection's channels and patterns} {
            wait_no_subscribers
            set old [lindex [r config get client-max-subscriptions] 1]
            r config set client-max-subscriptions 4
            set before [s client_state_limit_refusals]
            set c [redis_deferring_client]
            $c subscribe a b c
            read_n $c 3
            # Names already held do not count again; a command that would
            # pass the limit subscribes to nothing.
            $c subscribe a b
            read_n $c 2
            $c psubscribe p1* p2*
            catch {read_with_timeout $c} err
            assert_match {LIMIT this connection would have more than client-max-subscriptions (4)*} $err
            assert_equal 0 [r pubsub numpat]
            $c ssubscribe s1 s2
            catch {read_with_timeout $c} err
            assert_match {LIMIT *client-max-subscriptions*} $err
            assert_equal {} [r pubsub shardchannels]
            # Up to the limit is fine, and the connection still works.
            $c psubscribe p1*
            assert_equal {psubscribe p1* 4} [read_with_timeout $c]
            assert_equal 1 [r publish a hello]
            assert_equal {message a hello} [read_with_timeout $c]
            assert_equal [expr {$before + 2}] [s client_state_limit_refusals]
            # Leaving frees room.
            $c unsubscribe c
            read_with_timeout $c
            $c subscribe d
            assert_equal {subscribe d 4} [read_with_timeout $c]
            $c close
            r config set client-max-subscriptions $old
            wait_no_subscribers
        }
    }
}

start_server {tags {pubsub} overrides {timeout 1}} {
    test {timeout closes idle clients but not subscribers, which only listen} {
        set idle [redis_deferring_client]
        $idle ping
        read_with_timeout $idle
        set c [subscribed_client subscribe quiet]
        set ps [subscribed_client psubscribe quiet*]
        after 3000
        assert_error {*} {$idle ping; read_with_timeout $idle}
        reconnect ;# the default client was idle too
        assert_equal 2 [r publish quiet still]
        assert_equal {message quiet still} [read_with_timeout $c]
        assert_equal {pmessage quiet* quiet still} [read_with_timeout $ps]
        $c close
        $ps close
        catch {$idle close}
    }
}

start_server {tags {pubsub}} {
    test {client-output-buffer-limit shows all three classes, as Redis 7.0} {
        lindex [r config get client-output-buffer-limit] 1
    } {normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60}

    test {CONFIG SET of one class leaves the others} {
        r config set client-output-buffer-limit "pubsub 1mb 512kb 10"
        assert_equal {normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 524288 10} \
            [lindex [r config get client-output-buffer-limit] 1]
        r config set client-output-buffer-limit "normal 1mb 0 0 replica 1 2 3"
        assert_equal {normal 1048576 0 0 slave 1 2 3 pubsub 1048576 524288 10} \
            [lindex [r config get client-output-buffer-limit] 1]
        r config set client-output-buffer-limit "normal 0 0 0 slave 256mb 64mb 60 pubsub 32mb 8mb 60"
        lindex [r config get client-output-buffer-limit] 1
    } {normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60}

    # A subscriber that never reads while 64 MiB of messages are published:
    # more than the socket buffers hold, so its output buffer grows until
    # the pubsub limit cuts it off. (Redis 7.0 has no INFO counter for it;
    # CLIENT LIST and PUBSUB NUMSUB show it gone on both servers.)
    proc flood_subscriber {what} {
        set c [subscribed_client subscribe flood]
        set id [lindex [regexp -inline {id=(\d+)} [r client list type pubsub]] 1]
        set before [get_info_field r stats client_output_buffer_limit_disconnections]
        set msg [string repeat x [expr {1024 * 1024}]]
        for {set i 0} {$i < 64} {incr i} {
            if {[r publish flood $msg] == 0} break
        }
        wait_for_condition 100 50 {[r client list id $id] eq "" && [r pubsub numsub flood] eq {flood 0}} else {
            fail "the subscriber was not closed ($what)"
        }
        if {![server_is_redis]} {
            assert_morethan [get_info_field r stats client_output_buffer_limit_disconnections] $before
        }
        catch {$c close}
        # The server and its other clients carry on.
        r ping
    }

    test {A slow subscriber is cut off at the pubsub hard limit} {
        r config set client-output-buffer-limit "pubsub 4mb 0 0"
        flood_subscriber "pubsub hard limit 4mb"
        r config set client-output-buffer-limit "pubsub 32mb 8mb 60"
        r ping
    } {PONG}

    test {A subscriber over the pubsub soft limit for longer than soft-seconds is cut off} {
        r config set client-output-buffer-limit "pubsub 0 2mb 1"
        set c [subscribed_client subscribe soft]
        set id [lindex [regexp -inline {id=(\d+)} [r client list type pubsub]] 1]
        set msg [string repeat y [expr {1024 * 1024}]]
        set t0 [clock milliseconds]
        for {set i 0} {$i < 24} {incr i} { r publish soft $msg }
        # Still there right away: the soft limit allows a burst. "Right away"
        # is under soft-seconds since the first publish: a machine too busy
        # to publish 24 MiB within it may rightly have cut it off already.
        set seen [r client list id $id]
        if {[clock milliseconds] - $t0 < 1000} { assert_match "id=$id *" $seen }
        # Limits are checked as replies are queued: keep publishing a little
        # (Redis counts soft-seconds in whole seconds, so up to 2 s).
        for {set i 0} {$i < 50 && [r client list id $id] ne ""} {incr i} {
            r publish soft tick
            after 100
        }
        assert_equal {} [r client list id $id]
        catch {$c close}
        r config set client-output-buffer-limit "pubsub 32mb 8mb 60"
        r ping
    } {PONG}

    test {The normal class does not apply to subscribers, nor pubsub to normal clients} {
        r config set client-output-buffer-limit "normal 1mb 0 0 pubsub 0 0 0"
        set c [subscribed_client subscribe roomy]
        set id [lindex [regexp -inline {id=(\d+)} [r client list type pubsub]] 1]
        set msg [string repeat z [expr {1024 * 1024}]]
        for {set i 0} {$i < 16} {incr i} { r publish roomy $msg }
        after 200
        assert_match "id=$id *" [r client list id $id]
        # It can still read everything.
        for {set i 0} {$i < 16} {incr i} { assert_equal $msg [lindex [read_with_timeout $c] 2] }
        $c close
        r config set client-output-buffer-limit "normal 0 0 0 pubsub 32mb 8mb 60"
        r ping
    } {PONG}

    test {redis-py: subscribe, psubscribe, listen, publish, PUBSUB introspection} {
        set out [exec /usr/bin/python3 [file join $::harness(testsdir) helpers redis_py_pubsub.py] \
                     [srv 0 host] [srv 0 port] 2>@1]
        assert_match "*ALL OK*" $out
    }
}
