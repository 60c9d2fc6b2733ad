# Tenants are invisible to each other (issue 25, finding 7): every command
# that enumerates or reports keys, channels, segments, positions or events
# shows a tenant only what it could access itself, and an error never tells
# "another tenant's" from "nothing here". Redis leaks key and channel names
# through RANDOMKEY, DBSIZE and PUBSUB to a user restricted by ACL patterns,
# so these are mooncake-only.

start_server {tags {acl mooncake} overrides {segment-size 4mb evict-policy noeviction}} {
    r acl setuser alice on >pa ~tenantA:* &tenantA:* &__keyspace@0__:* &__keyevent@0__:* &__store@0__:* \
        &notify:end +@all
    r acl setuser bob on >pb ~tenantB:* &tenantB:* &__keyspace@0__:tenantB:* +@all
    set ca [redis_client]
    $ca auth alice pa
    set cb [redis_client]
    $cb auth bob pb

    test {RANDOMKEY never returns another tenant's key; DBSIZE counts only its own} {
        r flushall
        for {set i 0} {$i < 50} {incr i} { $cb set tenantB:k$i v }
        r set shared:k v
        # Only others have keys: nil every time, not a 1-in-N chance.
        for {set i 0} {$i < 200} {incr i} { assert_equal {} [$ca randomkey] }
        assert_equal 0 [$ca dbsize]
        $ca set tenantA:only v
        for {set i 0} {$i < 200} {incr i} { assert_equal tenantA:only [$ca randomkey] }
        assert_equal 1 [$ca dbsize]
        assert_equal 50 [$cb dbsize]
        assert_equal 52 [r dbsize]
        # An expired key of the tenant's own is not returned either.
        $ca pexpire tenantA:only 1
        wait_for_condition 100 10 {[$ca randomkey] eq {}} else { fail "expired key still drawn" }
    }

    test {PUBSUB CHANNELS, NUMSUB, NUMPAT and the shard forms show a tenant only its own} {
        set sb [redis_deferring_client]
        $sb auth bob pb
        $sb read
        $sb subscribe tenantB:ch
        $sb read
        $sb psubscribe tenantB:*
        $sb read
        $sb ssubscribe tenantB:sch
        $sb read
        set sa [redis_deferring_client]
        $sa auth alice pa
        $sa read
        $sa subscribe tenantA:ch
        $sa read
        assert_equal {tenantA:ch} [$ca pubsub channels]
        assert_equal {tenantA:ch} [$ca pubsub channels *]
        assert_equal {} [$ca pubsub channels tenantB:*]
        assert_equal {tenantB:ch 0 tenantA:ch 1} [$ca pubsub numsub tenantB:ch tenantA:ch]
        assert_equal 0 [$ca pubsub numpat]
        assert_equal {} [$ca pubsub shardchannels]
        assert_equal {tenantB:sch 0} [$ca pubsub shardnumsub tenantB:sch]
        $sa psubscribe tenantA:*
        $sa read
        assert_equal 1 [$ca pubsub numpat]
        # The default user still sees everything, as in Redis.
        assert_equal {tenantA:ch tenantB:ch} [lsort [r pubsub channels]]
        assert_equal 2 [r pubsub numpat]
        assert_equal {tenantB:sch 1} [r pubsub shardnumsub tenantB:sch]
        # A keyspace channel names a key: another tenant's is hidden even
        # from a tenant granted the notification channels.
        $sb subscribe __keyspace@0__:tenantB:secret
        $sb read
        assert_equal {} [$ca pubsub channels __keyspace@0__:*]
        assert_equal {__keyspace@0__:tenantB:secret 0} [$ca pubsub numsub __keyspace@0__:tenantB:secret]
        $sa close
        $sb close
    }

    # The server's event channels are granted by name to every tenant that
    # hears its own keys' events there: who else listens is another user's
    # connection. An ordinary channel two tenants may both name is shared,
    # and counted for both (as PUBLISH's reply counts its receivers).
    test {PUBSUB counts only a tenant's own listeners on the server's event channels; a shared channel counts all} {
        r acl setuser carol on >pc ~tenantC:* &__keyevent@0__:* &__store@0__:* &notify:end +@all
        set sc [redis_deferring_client]
        $sc auth carol pc
        $sc read
        $sc subscribe __keyevent@0__:set notify:end
        $sc read
        $sc read
        $sc psubscribe __store@0__:*
        $sc read
        assert_equal {__keyevent@0__:set 0 notify:end 1} [$ca pubsub numsub __keyevent@0__:set notify:end]
        assert_equal {notify:end} [$ca pubsub channels]
        assert_equal 0 [$ca pubsub numpat]
        # Its own listeners it sees, the others' still not.
        set sa [redis_deferring_client]
        $sa auth alice pa
        $sa read
        $sa subscribe __keyevent@0__:set
        $sa read
        $sa psubscribe __store@0__:*
        $sa read
        assert_equal {__keyevent@0__:set 1} [$ca pubsub numsub __keyevent@0__:set]
        assert_equal {__keyevent@0__:set notify:end} [lsort [$ca pubsub channels]]
        assert_equal 1 [$ca pubsub numpat]
        # Users with allkeys see everyone, as in Redis.
        assert_equal {__keyevent@0__:set 2} [r pubsub numsub __keyevent@0__:set]
        assert_equal 1 [r pubsub numpat]
        $sa close
        $sc close
        r acl deluser carol
    }

    test {Keyspace notifications and store events carry only the subscriber's own keys} {
        r config set notify-keyspace-events KEA\$S
        set l [redis_deferring_client]
        $l auth alice pa
        $l read
        $l subscribe notify:end
        $l read
        foreach p {__keyspace@0__:* __keyevent@0__:* __store@0__:*} {
            $l psubscribe $p
            $l read
        }
        $cb set tenantB:secret v
        $cb del tenantB:secret
        lassign [lindex [$cb put.start tenantB:obj 5] 0] seg off len
        $cb seg.write $seg $off hello
        $cb put.end tenantB:obj
        r set shared:secret v
        $ca set tenantA:mine v
        set heard {}
        foreach m [messages_until $l notify:end] { lappend heard [lrange $m 2 end] }
        assert_equal {} [lsearch -all -inline $heard *tenantB:*]
        assert_equal {} [lsearch -all -inline $heard *shared:*]
        assert {[llength [lsearch -all -inline $heard *tenantA:mine*]] >= 3}
        $l close
        r config set notify-keyspace-events ""
    }
    test {A tenant granted the server's event channels may listen, not publish: no forged events} {
        # Granted __keyspace@0__:* to hear its own keys' events, a tenant
        # could otherwise PUBLISH a "del" of another tenant's key to that
        # tenant's listeners (or a store event to a router).
        r config set notify-keyspace-events KA
        set l [redis_deferring_client]
        $l auth bob pb
        $l read
        $l psubscribe __keyspace@0__:tenantB:*
        $l read
        foreach {ch msg} {__keyspace@0__:tenantB:k del __keyevent@0__:del tenantB:k
                          __store@0__:remove {node=0 size=0 segments= key=tenantB:k}} {
            assert_error {NOPERM No permissions to access a channel} {$ca publish $ch $msg}
            assert_error {NOPERM No permissions to access a channel} {$ca spublish $ch $msg}
        }
        assert_match {*reason channel*object __store@0__:remove*} [lindex [$ca acl log 1] 0]
        # Its own channels stay its own to publish on.
        assert_equal 0 [$ca publish tenantA:news hi]
        # The first event bob hears is the server's, for a real write.
        $cb set tenantB:k v
        assert_equal {pmessage __keyspace@0__:tenantB:* __keyspace@0__:tenantB:k set} [$l read]
        # A server user publishes there as in Redis.
        assert_equal 1 [r publish __keyspace@0__:tenantB:k hello]
        assert_equal {pmessage __keyspace@0__:tenantB:* __keyspace@0__:tenantB:k hello} [$l read]
        $l close
        r config set notify-keyspace-events ""
    }

    test {SEG.READ/SEG.WRITE over another tenant's object answer as over free space} {
        set v secretsecret
        lassign [lindex [$cb put.start tenantB:seg [string length $v]] 0] seg off len
        $cb seg.write $seg $off $v
        $cb put.end tenantB:seg
        set size [dict get [r segment.info $seg] size]
        set free [expr {$size - 64}]
        r acl log reset
        set e1 [catch {$ca seg.read $seg $off $len} r1]
        set e2 [catch {$ca seg.read $seg $free 8} r2]
        assert_equal {1 1} [list $e1 $e2]
        assert_equal $r2 $r1
        # Part of it, and the vector form.
        catch {$ca seg.read $seg [expr {$off + 3}] 2} r3
        assert_equal $r2 $r3
        catch {$ca seg.readv $seg $off $len} r4
        catch {$ca seg.readv $seg $free 8} r5
        assert_equal $r5 $r4
        # A pending object of another tenant's, small and in-place payloads.
        lassign [lindex [$cb put.start tenantB:pend 40000] 0] seg off len
        catch {$ca seg.write $seg $off XXXX} w1
        catch {$ca seg.write $seg $free XXXX} w2
        assert_equal $w2 $w1
        catch {$ca seg.write $seg $off [string repeat X 40000]} w3
        catch {$ca seg.write $seg [expr {$free - 40000}] [string repeat X 40000]} w4
        assert_equal $w4 $w3
        $cb put.revoke tenantB:pend
        # The refusals are logged for the server's users, naming the object's
        # key; the tenant's own ACL LOG has none of them: an entry there
        # would say which offsets hold an object, and whose.
        assert_match {*tenantB:seg*} [r acl log]
        assert_match {*tenantB:pend*} [r acl log]
        assert_equal {} [$ca acl log]
    }

    test {SEG.READ of another tenant's segment id answers as a segment that does not exist} {
        set idb [$cb mount tenB-hosted 1mb OWNER ownerB ENDPOINT tcp://127.0.0.1:1]
        catch {$ca seg.read $idb 0 8} r1
        catch {$ca seg.read 987654321 0 8} r2
        assert_equal $r2 $r1
        assert_equal 0 [$cb unmount tenB-hosted]
    }

    test {MOUNT of another tenant's segment name answers as a free name would} {
        set idb [$cb mount samename 1mb OWNER ownerB]
        # Alice gets a segment of her own under the name, as with a free one.
        set ida [$ca mount samename 1mb OWNER ownerA]
        set idf [$ca mount freename 1mb OWNER ownerA]
        assert_not_equal $idb $ida
        assert_equal $ida [dict get [$ca segment.info samename] id]
        assert_equal $idb [dict get [$cb segment.info samename] id]
        set names {}
        foreach s [$ca segments] { lappend names [dict get $s name] }
        assert_equal {freename samename self} [lsort $names]
        # UNMOUNT answers the objects lost with the segment: none here.
        # Mounting again is idempotent for each, and each unmounts its own.
        assert_equal $ida [$ca mount samename 1mb OWNER ownerA]
        assert_equal $idb [$cb mount samename 1mb OWNER ownerB]
        assert_equal 0 [$ca unmount samename]
        assert_equal $idb [dict get [$cb segment.info samename] id]
        assert_equal {} [$ca segment.info samename]
        assert_error {ERR no such segment*} {$ca unmount samename}
        assert_equal 0 [$cb unmount samename]
        assert_equal 0 [$ca unmount freename]
    }

    test {A name a tenant can see is still taken: a shared segment's name is EXISTS} {
        r mount sharedname 1mb OWNER admin
        assert_error {EXISTS*} {$ca mount sharedname 1mb OWNER ownerA}
        # The server's users see every tenant's: a name one tenant holds is EXISTS for them.
        $cb mount bobsname 1mb OWNER ownerB
        assert_error {EXISTS*} {r mount bobsname 1mb OWNER admin}
        r unmount sharedname
        $cb unmount bobsname
    }

    test {A tenant's FLUSHALL (SYNC or ASYNC) empties only its own keys} {
        r flushall
        $ca set tenantA:1 v
        $cb set tenantB:1 v
        r set shared:1 v
        assert_equal OK [$ca flushall]
        assert_equal OK [$ca flushall async]
        assert_equal 0 [$ca dbsize]
        assert_equal v [$cb get tenantB:1]
        assert_equal v [r get shared:1]
        assert_equal 2 [r dbsize]
    }

    test {CLIENT LIST and CLIENT KILL reach only the tenant's own connections} {
        $ca client setname alice-conn
        $cb client setname bob-conn
        set list [$ca client list]
        assert_match {*name=alice-conn*} $list
        assert_no_match {*bob-conn*} $list
        assert_no_match {*user=default*} $list
        set bid [$cb client id]
        assert_equal {} [string trim [$ca client list id $bid]]
        assert_equal 0 [$ca client kill id $bid]
        assert_error {ERR No such user*} {$ca client kill user bob}
        regexp {addr=(\S+)} [$cb client info] -> baddr
        assert_error {ERR No such client*} {$ca client kill $baddr}
        assert_equal PONG [$cb ping]
        # The default user still sees and reaches everyone, as in Redis.
        assert_match {*bob-conn*} [r client list]
    }

    test {MONITOR and SLOWLOG show a tenant only its own user's commands} {
        set m [redis_deferring_client]
        $m auth alice pa
        $m read
        $m monitor
        assert_equal OK [$m read]
        $cb set tenantB:watched v
        r set shared:watched v
        $ca set tenantA:watched v
        set line [$m read]
        assert_match {*tenantA:watched*} $line
        $m close
        r config set slowlog-log-slower-than 0
        r slowlog reset
        $cb set tenantB:slow v
        $ca set tenantA:slow v
        set n [$ca slowlog len]
        set all [$ca slowlog get -1]
        assert_match {*tenantA:slow*} $all
        assert_no_match {*tenantB:slow*} $all
        # ... plus the SLOWLOG LEN just run, logged after it answered.
        assert_equal [expr {$n + 1}] [llength $all]
        assert_match {*tenantB:slow*} [r slowlog get -1]
        r config set slowlog-log-slower-than 10000
    }

    test {SLOWLOG RESET by a tenant clears its own entries only} {
        # A tenant sees its own entries (above); its RESET must not erase
        # the others' and the server users' record of slow commands.
        r config set slowlog-log-slower-than 0
        r slowlog reset
        $cb set tenantB:kept v
        r set shared:kept v
        $ca set tenantA:gone v
        assert_equal OK [$ca slowlog reset]
        set all [r slowlog get -1]
        assert_match {*tenantB:kept*} $all
        assert_match {*shared:kept*} $all
        assert_no_match {*tenantA:gone*} $all
        # Alice's own log starts again from her RESET (logged after it answered).
        set mine [$ca slowlog get -1]
        assert_no_match {*tenantA:gone*} $mine
        assert_match {*slowlog*reset*} $mine
        assert_no_match {*tenantB*} $mine
        # Bob's entries are still his to see, and a server user's RESET clears all.
        assert_match {*tenantB:kept*} [$cb slowlog get -1]
        r slowlog reset
        assert_no_match {*tenantB:kept*} [r slowlog get -1]
        r config set slowlog-log-slower-than 10000
    }

    test {ACL LOG shows a tenant only its own user's refusals, and its RESET clears only those} {
        # Another's refusal names the key it was refused (a prefix probed)
        # and the connection; like SLOWLOG, a tenant's view is its own.
        r acl log reset
        catch {$cb get tenantA:probed-by-bob}
        catch {$ca get tenantB:probed-by-alice}
        set intruder [redis_client]
        catch {$intruder auth bob wrong-password}
        $intruder close
        set mine [$ca acl log]
        assert_equal 1 [llength $mine]
        assert_match {*tenantB:probed-by-alice*} $mine
        assert_no_match {*probed-by-bob*} $mine
        assert_no_match {*username bob*} $mine
        # COUNT counts among its own entries.
        assert_equal 1 [llength [$ca acl log 5]]
        # Bob sees his two: the key he was refused and the failed AUTH as him.
        assert_equal 2 [llength [$cb acl log]]
        assert_equal OK [$ca acl log reset]
        assert_equal {} [$ca acl log]
        assert_equal 2 [llength [$cb acl log]]
        assert_equal 2 [llength [r acl log]]
        # A server user's RESET clears every user's.
        r acl log reset
        assert_equal {} [$cb acl log]
    }

    test {ACL USERS, LIST, GETUSER and DRYRUN show a tenant only its own user} {
        # Another user's rules say its prefix, and its password digests (the
        # default user's is requirepass's) are unsalted SHA-256, open to an
        # offline search: a tenant granted these reads only itself.
        assert_equal alice [$ca acl users]
        set lines [$ca acl list]
        assert_equal 1 [llength $lines]
        assert_match {user alice on #* ~tenantA:* *} [lindex $lines 0]
        assert_equal {} [$ca acl getuser bob]
        assert_equal {} [$ca acl getuser default]
        assert_match {*~tenantA:**} [$ca acl getuser alice]
        assert_error {ERR User 'bob' not found} {$ca acl dryrun bob get tenantB:k}
        assert_equal OK [$ca acl dryrun alice get tenantA:k]
        # Server users see everyone, as in Redis.
        assert_equal {alice bob default} [r acl users]
        assert_match {*~tenantB:**} [r acl getuser bob]
        assert_equal OK [r acl dryrun bob get tenantB:k]
    }

    test {CONFIG GET never gives a tenant the server's passwords (requirepass, masterauth)} {
        # A tenant granted CONFIG GET to read limits would otherwise read
        # the default user's password, and with it every tenant's keys.
        r config set masterauth primary-secret
        assert_equal [r config get maxmemory-policy] [$ca config get maxmemory-policy]
        assert_equal {} [$ca config get requirepass]
        assert_equal {} [$ca config get masterauth]
        set all [$ca config get *]
        assert {[dict exists $all maxmemory]}
        assert {![dict exists $all requirepass]}
        assert {![dict exists $all masterauth]}
        assert_no_match {*primary-secret*} $all
        # A server user reads them, as in Redis.
        assert_equal {masterauth primary-secret} [r config get masterauth]
        assert_equal {requirepass {}} [r config get requirepass]
        r config set masterauth ""
    }


    test {Owner names are per tenant: another tenant's owner name is free, and the same name is two owners} {
        set idb [$cb mount ownb-seg 1mb OWNER sharedname-owner]
        # Not "EXISTS owner ... belongs to another user": alice's own owner.
        set ida [$ca mount owna-seg 1mb OWNER sharedname-owner]
        assert_not_equal $idb $ida
        assert_equal OK [$ca heartbeat sharedname-owner]
        assert_equal OK [$cb heartbeat sharedname-owner]
        # A name nobody uses and another tenant's answer alike.
        assert_error {NEEDREMOUNT*} {$ca heartbeat nobody-owner}
        # The admin's own owner namespace: its name is free for a tenant too.
        r mount adm-seg 1mb OWNER adminowner
        set idx [$ca mount owna-seg2 1mb OWNER adminowner]
        # Alice's connection closing orphans her owners only, not bob's or the admin's.
        set c2 [redis_client]
        $c2 auth alice pa
        $c2 mount owna-seg3 1mb OWNER alice-only
        $c2 close
        wait_for_condition 100 10 {[dict get [r segment.info owna-seg3] state] eq "orphaned"} else {
            fail "alice's owner not orphaned"
        }
        assert_equal active [dict get [r segment.info ownb-seg] state]
        assert_equal active [dict get [r segment.info adm-seg] state]
        # The server's users still reach a tenant's owner by its name.
        assert_equal OK [r heartbeat alice-only]
        foreach {cl n} [list $ca owna-seg $ca owna-seg2 $ca owna-seg3 $cb ownb-seg r adm-seg] {
            assert_equal 0 [$cl unmount $n]
        }
    }

    test {The flush event tells a tenant that everything went, not how many keys the server held} {
        r config set notify-keyspace-events \$S
        r flushall
        for {set i 0} {$i < 7} {incr i} { r set shared:f$i v }
        $ca set tenantA:f v
        set la [redis_deferring_client]
        $la auth alice pa
        $la read
        $la subscribe __store@0__:flush
        $la read
        set lr [redis_deferring_client]
        $lr subscribe __store@0__:flush
        $lr read
        r flushall
        set ma [$la read]
        set mr [$lr read]
        assert_match {node=*} [lindex $ma 2]
        assert_no_match {*keys=*} [lindex $ma 2]
        assert_match {*keys=8} [lindex $mr 2]
        $la close
        $lr close
        r config set notify-keyspace-events ""
    }

    test {SEGMENTS, SEGMENT.INFO and INFO show a tenant a shared segment's capacity, not others' usage} {
        r flushall
        r mount shared-usage 1mb OWNER admin
        for {set i 0} {$i < 20} {incr i} { $cb set tenantB:u$i [string repeat x 2000] }
        set pool [r segment.info self]
        assert {[dict get $pool used] > 0 && [dict get $pool objects] >= 20}
        foreach name {self shared-usage} {
            set si [$ca segment.info $name]
            assert_equal 0 [dict get $si used]
            assert_equal 0 [dict get $si objects]
            assert_equal [dict get $si size] [dict get $si free]
        }
        foreach s [$ca segments] {
            if {[dict get $s name] eq "self"} { assert_equal 0 [dict get $s used] }
        }
        # The tenant's own segment: what it holds is its own.
        $ca mount mine-usage 1mb OWNER ownerA
        assert_equal [dict get [r segment.info mine-usage] free] [dict get [$ca segment.info mine-usage] free]
        set info [$ca info segments]
        assert {[regexp -line {name=self,.*used=0,objects=0,} $info]}
        assert_no_match {*tenB*} $info
        # The server's users see the real figures.
        assert {![regexp -line {name=self,.*used=0,objects=0,} [r info segments]]}
        $ca unmount mine-usage
        r unmount shared-usage
    }


    test {A tenant's DBSIZE equals its KEYS through a random sequence of writes, with overlapping and exact patterns} {
        r flushall
        r acl setuser dave on >pd ~tenantA:s:* ~tenantA:s:deep:* ~tenantD:* ~tenantA:exact +@all
        set cd [redis_client]
        $cd auth dave pd
        expr {srand(25)}
        set names {tenantA:k tenantA:s:k tenantA:s:deep:k tenantA:exact tenantD:k shared:k tenantA:exac}
        for {set step 0} {$step < 600} {incr step} {
            set k "[lindex $names [expr {int(rand() * [llength $names])}]][expr {int(rand() * 8)}]"
            if {[string match tenantA:exac* $k] && rand() < 0.5} { set k tenantA:exact }
            set k2 "[lindex $names [expr {int(rand() * [llength $names])}]][expr {int(rand() * 8)}]"
            switch [expr {int(rand() * 10)}] {
                0 - 1 - 2 { r set $k v }
                3 { r del $k }
                4 { catch {r rename $k $k2} }
                5 { catch {r copy $k $k2} }
                6 { r pexpire $k 1 }
                7 { if {rand() < 0.1} { r flushall async } else { r set $k v } }
                8 { $cd set tenantD:own[expr {int(rand() * 4)}] v }
                9 { if {rand() < 0.2} { $cd flushall } else { r unlink $k } }
            }
            foreach {cl who} [list $ca alice $cd dave] {
                set n [$cl dbsize]
                set keys [$cl keys *]
                # Expired keys not yet removed: KEYS hides them, DBSIZE counts them (as Redis does).
                if {$n != [llength $keys]} {
                    wait_for_condition 100 10 {[$cl dbsize] == [llength [$cl keys *]]} else {
                        fail "step $step: $who dbsize [$cl dbsize] keys [llength [$cl keys *]]"
                    }
                }
            }
        }
        assert_equal 0 [get_info_field r keyspace tenant_keys_walked]
        $cd close
        r acl deluser dave
    }

    proc walked {} { return [get_info_field r keyspace tenant_keys_walked] }

    test {A tenant's DBSIZE, RANDOMKEY and INFO keyspace cost nothing in the others' keys} {
        r flushall
        for {set i 0} {$i < 20000} {incr i} { r set shared:p$i v }
        for {set i 0} {$i < 3} {incr i} { $ca set tenantA:r$i v }
        set before [walked]
        for {set i 0} {$i < 50} {incr i} {
            assert_equal 3 [$ca dbsize]
            assert_match {tenantA:r*} [$ca randomkey]
        }
        assert_equal 0 [$cb dbsize]
        assert_equal {} [$cb randomkey]
        assert_match {*db0:keys=3,expires=0,*} [$ca info keyspace]
        # The index's own figures are all tenants': the server's users' only.
        assert_no_match {*tenant_index_entries*} [$ca info keyspace]
        assert_equal 3 [get_info_field r keyspace tenant_index_entries]
        # Her FLUSHALL and REMOVE.ALL go through her own keys only.
        $ca set tenantA:gone v
        assert_equal OK [$ca flushall]
        assert_equal 0 [$ca dbsize]
        for {set i 0} {$i < 3} {incr i} { $ca set tenantA:x$i v }
        assert_equal 3 [$ca remove.all]
        for {set i 0} {$i < 3} {incr i} { $ca set tenantA:r$i v }
        assert_equal 20003 [r dbsize]
        assert_equal $before [walked]
        # Every one of alice's keys is drawn.
        set seen {}
        for {set i 0} {$i < 300} {incr i} { dict set seen [$ca randomkey] 1 }
        assert_equal {tenantA:r0 tenantA:r1 tenantA:r2} [lsort [dict keys $seen]]
    }

    test {A tenant's DBSIZE stays exact through DEL, EXPIRE, eviction, RENAME, FLUSHALL ASYNC and ACL changes} {
        r flushall
        for {set i 0} {$i < 10} {incr i} { $ca set tenantA:e$i v }
        for {set i 0} {$i < 5} {incr i} { $cb set tenantB:e$i v }
        assert_equal 10 [$ca dbsize]
        $ca del tenantA:e0 tenantA:e1
        assert_equal 8 [$ca dbsize]
        $ca pexpire tenantA:e2 1
        wait_for_condition 100 10 {[$ca dbsize] == 7} else { fail "expired key still counted" }
        # RENAME within the tenant keeps the count; the admin moves keys across.
        $ca rename tenantA:e3 tenantA:e3b
        assert_equal 7 [$ca dbsize]
        r rename tenantA:e4 tenantB:from-a
        assert_equal {6 6} [list [$ca dbsize] [$cb dbsize]]
        r copy tenantB:e0 tenantA:copied
        assert_equal 7 [$ca dbsize]
        # A pattern added later is indexed with the keys already there.
        r set tenantC:x v
        r acl setuser alice ~tenantC:*
        assert_equal 8 [$ca dbsize]
        r acl setuser alice resetkeys ~tenantA:*
        assert_equal 7 [$ca dbsize]
        # PUT.END adds, REMOVE removes.
        lassign [lindex [$ca put.start tenantA:obj 5] 0] seg off len
        $ca seg.write $seg $off hello
        $ca put.end tenantA:obj
        assert_equal 8 [$ca dbsize]
        $ca remove tenantA:obj
        assert_equal 7 [$ca dbsize]
        # Eviction: the admin's values push alice's out of the pool.
        r config set evict-policy lru
        set big [string repeat x 100000]
        for {set i 0} {$i < 30} {incr i} { $ca set tenantA:big$i $big }
        for {set i 0} {$i < 30} {incr i} { r set shared:big$i $big }
        r config set evict-policy noeviction
        assert {[get_info_field r stats evicted_keys] > 0}
        assert {[$ca dbsize] < 37}
        assert_equal [llength [$ca keys *]] [$ca dbsize]
        # FLUSHALL ASYNC by the admin: nothing left for anyone, at once.
        for {set i 0} {$i < 5} {incr i} { $ca set tenantA:f$i v }
        r flushall async
        assert_equal {0 0 {}} [list [$ca dbsize] [$cb dbsize] [$ca randomkey]]
        $ca set tenantA:after v
        assert_equal 1 [$ca dbsize]
        # A tenant's own FLUSHALL, and a sync one.
        $ca flushall
        assert_equal 0 [$ca dbsize]
        $ca set tenantA:sync v
        r flushall
        assert_equal 0 [$ca dbsize]
    }

    test {A tenant with a pattern the index does not cover still counts right (by a walk, counted)} {
        r flushall
        r acl setuser carol on >pc ~*:carol +@all
        set cc [redis_client]
        $cc auth carol pc
        r set a:carol v
        r set b:carol v
        r set a:other v
        set before [walked]
        assert_equal 2 [$cc dbsize]
        assert {[walked] > $before}
        $cc close
        r acl deluser carol
    }

    $ca close
    $cb close
}
