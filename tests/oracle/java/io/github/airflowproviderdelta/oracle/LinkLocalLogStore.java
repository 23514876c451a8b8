package io.github.airflowproviderdelta.oracle;

import io.delta.storage.LocalLogStore;
import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * Test-only: Delta Spark's LocalLogStore with a put-if-absent that holds across processes.
 *
 * <p>LocalLogStore checks that a commit file is absent, then renames a temporary file onto it with
 * File.renameTo, which replaces an existing file; its lock is per JVM. When another process (our writer)
 * creates the same commit in between, that commit is silently overwritten. This store publishes the commit
 * with a hard link instead (link(2) fails if the name exists), the local-disk counterpart of the conditional
 * puts Delta Spark uses on object stores, so that the oracle tests can race Delta Spark against our writer
 * on one local table.
 */
public class LinkLocalLogStore extends LocalLogStore {
  public LinkLocalLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    if (overwrite) {
      super.write(path, actions, true, hadoopConf);
      return;
    }
    java.nio.file.Path target = Paths.get(path.toUri());
    java.nio.file.Path tmp =
        target.resolveSibling("." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
    try (Writer out = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8)) {
      while (actions.hasNext()) {
        out.write(actions.next());
        out.write('\n');
      }
    }
    try {
      Files.createLink(target, tmp);
    } catch (FileAlreadyExistsException e) {
      throw new FileAlreadyExistsException(path.toString());
    } finally {
      Files.deleteIfExists(tmp);
    }
  }
}
